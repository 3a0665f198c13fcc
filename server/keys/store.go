package keys

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/sqlitedb"
)

// Key format: "rk_" followed by the unpadded base64url encoding of 32 random
// bytes (43 characters).
const (
	keyPrefix     = "rk_"
	keyRandomSize = 32
	keyBodyLen    = 43 // base64.RawURLEncoding.EncodedLen(keyRandomSize)
	keyLen        = len(keyPrefix) + keyBodyLen
	displayLen    = 8
	idBytes       = 8 // 16 hex characters
)

// busyTimeout is how long a statement waits for a lock held by another
// connection (for example another relay process) before failing.
const busyTimeout = 5 * time.Second

//go:embed migrations/*.sql
var migrationFS embed.FS

// Store holds the relay's API keys in a SQLite database and an in-memory
// index used by Authenticate.
//
// The database is the authority: Create, Revoke, Get, List, Count and
// Bootstrap read or write it directly. Authenticate never touches the
// database; it consults an index of all keys, keyed by the SHA-256 of the
// key, that is loaded by Open and updated by Create, Revoke and Bootstrap
// after their transaction commits. A revocation therefore takes effect on the
// very next Authenticate in the same process.
//
// Several relay processes sharing one relay.db do not see each other's
// changes in Authenticate until they call Reload: a key created by another
// process is rejected as unknown, and a key revoked by another process keeps
// working, until then. Such a deployment must call Reload periodically or on
// a change notification.
//
// A Store is safe for concurrent use. Authenticate takes no lock.
type Store struct {
	db    *sql.DB
	clock func() time.Time

	// writeMu serialises every change to the database and to idx, so that the
	// index is always replaced by a writer that saw the latest committed state.
	writeMu sync.Mutex
	// idx is the current in-memory index. It is never modified once
	// published; writers publish a modified copy.
	idx atomic.Pointer[index]
	// suspended holds the suspended accounts by id, for Authenticate. It
	// is never modified once published; writers publish a new map.
	suspended atomic.Pointer[map[string]Account]
}

// index is an immutable snapshot of all keys.
type index struct {
	byHash map[[sha256.Size]byte]*Key
	byID   map[string][sha256.Size]byte
}

// with returns a copy of ix in which the key with hash h is k.
func (ix *index) with(h [sha256.Size]byte, k Key) *index {
	n := &index{
		byHash: make(map[[sha256.Size]byte]*Key, len(ix.byHash)+1),
		byID:   make(map[string][sha256.Size]byte, len(ix.byID)+1),
	}
	for hh, kk := range ix.byHash {
		n.byHash[hh] = kk
	}
	for id, hh := range ix.byID {
		n.byID[id] = hh
	}
	n.byHash[h] = &k
	n.byID[k.ID] = h
	return n
}

// Open opens (creating if needed) the SQLite database at path, normally
// <data>/relay.db, applies any pending schema migrations and loads every key
// into memory. The database uses WAL journaling, synchronous=FULL, a busy
// timeout and a single connection; a new database file is created with mode
// 0600. clock supplies the current time for creation, revocation and expiry
// checks; nil means time.Now.
func Open(path string, clock func() time.Time) (*Store, error) {
	if clock == nil {
		clock = time.Now
	}
	db, err := sqlitedb.Open(path, busyTimeout)
	if err != nil {
		return nil, fmt.Errorf("keys: %w", err)
	}

	s := &Store{db: db, clock: clock}
	ctx := context.Background()
	if err := s.checkPragmas(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.migrate(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.Reload(ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// checkPragmas verifies that the connection settings took effect.
func (s *Store) checkPragmas(ctx context.Context) error {
	var mode string
	if err := s.db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("keys: open database: %w", err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("keys: open database: journal mode is %q, want wal", mode)
	}
	var sync int
	if err := s.db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&sync); err != nil {
		return fmt.Errorf("keys: open database: %w", err)
	}
	if sync != 2 { // FULL
		return fmt.Errorf("keys: open database: synchronous is %d, want 2 (FULL)", sync)
	}
	return nil
}

// schemaTable records the applied migrations of this package. relay.db is
// shared with other packages, so the table name is specific to the keys
// package.
const schemaTable = "keys_schema_version"

// schemaVersions is where this package records its applied migrations.
func (s *Store) schemaVersions() sqlitedb.Versions {
	return sqlitedb.Versions{
		Table:         schemaTable,
		AppliedAtType: "TEXT",
		AppliedAt:     func() any { return formatTime(normTime(s.clock())) },
	}
}

// migrate applies every embedded migration newer than the version recorded
// in the database (see sqlitedb.Migrate).
func (s *Store) migrate(ctx context.Context) error {
	ms, err := sqlitedb.Migrations(migrationFS, "migrations")
	if err == nil {
		err = sqlitedb.Migrate(ctx, s.db, s.schemaVersions(), ms)
	}
	if err != nil {
		return fmt.Errorf("keys: %w", err)
	}
	return nil
}

// Close closes the database. Authenticate keeps answering from memory after
// Close; every other method fails.
func (s *Store) Close() error {
	return s.db.Close()
}

// Reload re-reads every key from the database and replaces the in-memory
// index used by Authenticate. Open calls it; a process sharing relay.db with
// other relay processes must call it to see their creations and revocations.
func (s *Store) Reload(ctx context.Context) error {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("keys: load keys: %w", err)
	}
	defer rows.Close()
	ix := &index{
		byHash: make(map[[sha256.Size]byte]*Key),
		byID:   make(map[string][sha256.Size]byte),
	}
	for rows.Next() {
		k, h, err := scanKey(rows)
		if err != nil {
			return fmt.Errorf("keys: load keys: %w", err)
		}
		ix.byHash[h] = &k
		ix.byID[k.ID] = h
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("keys: load keys: %w", err)
	}
	if err := s.loadSuspended(ctx); err != nil {
		return err
	}
	s.idx.Store(ix)
	return nil
}

// Create stores a new key described by spec and returns the key's plaintext
// together with its description. The plaintext is returned only here: the
// database keeps its SHA-256, and it cannot be recovered later. An invalid
// spec yields an error wrapping ErrInvalid. Create checks no authority and
// records no creator: the key service uses CreateAs.
func (s *Store) Create(ctx context.Context, spec Spec) (string, Key, error) {
	return s.create(ctx, spec, "", nil)
}

// CreateAs creates a key on the authority of the key actor: the new key must
// be within actor's bindings (see [Authorize]), and it records actor's ID as
// its creator. An invalid spec yields an error wrapping ErrInvalid, checked
// first; a key beyond actor's authority an error matching ErrForbidden.
// Either way nothing is stored.
func (s *Store) CreateAs(ctx context.Context, actor Key, spec Spec) (string, Key, error) {
	check, err := CreateCheck(actor)
	if err != nil {
		return "", Key{}, err
	}
	// A key is always made in the account of the key that creates it.
	spec.AccountID = actor.Account()
	return s.create(ctx, spec, actor.ID, check)
}

// create stores a key made from spec with the given creator, after check
// (when not nil) accepted the validated key.
func (s *Store) create(ctx context.Context, spec Spec, createdBy string, check func(Key) error) (string, Key, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return "", Key{}, fmt.Errorf("keys: create key: %w", err)
	}
	defer tx.Rollback()
	plaintext, k, h, err := s.insert(ctx, tx, spec, createdBy, check)
	if err != nil {
		return "", Key{}, err
	}
	if err := tx.Commit(); err != nil {
		return "", Key{}, fmt.Errorf("keys: create key: %w", err)
	}
	s.idx.Store(s.idx.Load().with(h, k))
	return plaintext, k.clone(), nil
}

// insert mints a key from spec (see [Mint]) and inserts it within tx,
// recording createdBy as its creator. It returns the plaintext, the stored
// description and the hash.
func (s *Store) insert(ctx context.Context, tx *sql.Tx, spec Spec, createdBy string, check func(Key) error) (string, Key, [sha256.Size]byte, error) {
	m, err := Mint(spec, createdBy, s.clock(), check)
	if err != nil {
		return "", Key{}, [sha256.Size]byte{}, err
	}
	k, h := m.Key, m.Hash
	scopes, clientIDs, clientUsers, err := encodeLists(k)
	if err != nil {
		return "", Key{}, [sha256.Size]byte{}, fmt.Errorf("keys: create key: %w", err)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO api_keys
		(id, key_hash, prefix, name, scopes, client_ids, scoped_user_id, client_users, expires_at, enabled, created_at, revoked_at, created_by, account_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, NULL, ?, ?)`,
		k.ID, h[:], k.Prefix, k.Name, scopes, clientIDs, k.ScopedUserID, clientUsers,
		nullTime(k.ExpiresAt), formatTime(k.CreatedAt), k.CreatedBy, k.Account())
	if err != nil {
		// The error cannot contain the plaintext: only its hash is a parameter.
		return "", Key{}, [sha256.Size]byte{}, fmt.Errorf("keys: create key: %w", err)
	}
	return m.Plaintext, k, h, nil
}

// List returns every key, revoked ones included, in order of creation.
func (s *Store) List(ctx context.Context) ([]Key, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+keyColumns+` FROM api_keys ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("keys: list keys: %w", err)
	}
	defer rows.Close()
	var out []Key
	for rows.Next() {
		k, _, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("keys: list keys: %w", err)
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("keys: list keys: %w", err)
	}
	return out, nil
}

// ListAs returns the keys that actor may see, revoked ones included, in
// order of creation: those inside its bindings (see [Authorize]), itself
// among them.
func (s *Store) ListAs(ctx context.Context, actor Key) ([]Key, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(k Key) bool { return Authorize(actor, ActionList, k) != nil }), nil
}

// Get returns the key with the given id, or an error wrapping ErrNotFound.
func (s *Store) Get(ctx context.Context, id string) (Key, error) {
	k, _, err := getKey(ctx, s.db, id)
	return k, err
}

// queryer is implemented by *sql.DB and *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// getKey reads the key with the given id and its hash.
func getKey(ctx context.Context, q queryer, id string) (Key, [sha256.Size]byte, error) {
	k, h, err := scanKey(q.QueryRowContext(ctx, `SELECT `+keyColumns+` FROM api_keys WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Key{}, h, notFound(id)
	}
	if err != nil {
		return Key{}, h, fmt.Errorf("keys: get key: %w", err)
	}
	return k, h, nil
}

// Revoke marks the key with the given id revoked and disabled and returns
// it. The change reaches Authenticate before Revoke returns. Revoking a
// revoked key is not an error and keeps the first revocation time. An
// unknown id yields an error wrapping ErrNotFound. Revoke checks no
// authority: the key service uses RevokeAs.
func (s *Store) Revoke(ctx context.Context, id string) (Key, error) {
	return s.revoke(ctx, id, nil)
}

// RevokeAs revokes the key with the given id, as Revoke does, on the
// authority of the key actor: the key must be inside actor's bindings (see
// [Authorize]); otherwise RevokeAs changes nothing and returns an error
// matching ErrForbidden. An unknown id yields an error wrapping ErrNotFound.
func (s *Store) RevokeAs(ctx context.Context, actor Key, id string) (Key, error) {
	return s.revoke(ctx, id, func(k Key) error { return Authorize(actor, ActionRevoke, k) })
}

// revoke revokes the key with the given id after check (when not nil)
// accepted it, all in one transaction.
func (s *Store) revoke(ctx context.Context, id string, check func(Key) error) (Key, error) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Key{}, fmt.Errorf("keys: revoke key: %w", err)
	}
	defer tx.Rollback()
	if check != nil {
		k, _, err := getKey(ctx, tx, id)
		if err != nil {
			return Key{}, err
		}
		if err := check(k); err != nil {
			return Key{}, err
		}
	}
	now := normTime(s.clock())
	res, err := tx.ExecContext(ctx,
		`UPDATE api_keys SET enabled = 0, revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`,
		formatTime(now), id)
	if err != nil {
		return Key{}, fmt.Errorf("keys: revoke key: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return Key{}, fmt.Errorf("keys: revoke key: %w", err)
	} else if n == 0 {
		return Key{}, notFound(id)
	}
	k, h, err := getKey(ctx, tx, id)
	if err != nil {
		return Key{}, err
	}
	if err := tx.Commit(); err != nil {
		return Key{}, fmt.Errorf("keys: revoke key: %w", err)
	}
	s.idx.Store(s.idx.Load().with(h, k))
	return k.clone(), nil
}

// Count returns the number of stored keys, revoked ones included.
func (s *Store) Count(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM api_keys`).Scan(&n); err != nil {
		return 0, fmt.Errorf("keys: count keys: %w", err)
	}
	return n, nil
}

// Authenticate returns the key whose plaintext is presented, for example in
// an x-api-key header. It costs one SHA-256 and one map lookup and never
// touches the database. It fails with ErrMissing for an empty string,
// ErrUnknown for a malformed or unknown key, and ErrRevoked, ErrDisabled or
// ErrExpired (checked in that order) for a key that exists but may not be
// used; on failure the returned Key is the zero value.
func (s *Store) Authenticate(ctx context.Context, plaintext string) (Key, error) {
	k, err := s.usable(plaintext)
	if err != nil {
		return Key{}, err
	}
	return k.clone(), nil
}

// Check reports what Authenticate would, without handing out a copy of the
// key: admission needs only the verdict.
func (s *Store) Check(_ context.Context, plaintext string) error {
	_, err := s.usable(plaintext)
	return err
}

// usable returns the stored record of the usable key presented; its lists
// are the store's own, not to be handed out.
func (s *Store) usable(plaintext string) (*Key, error) {
	h, err := HashPresented(plaintext)
	if err != nil {
		return nil, err
	}
	// Looking up the hash (not the key) leaks nothing useful through timing:
	// an attacker would need a SHA-256 preimage to exploit it.
	k, ok := s.idx.Load().byHash[h]
	if !ok {
		return nil, ErrUnknown
	}
	if err := k.Usable(s.clock()); err != nil {
		return nil, err
	}
	if a, ok := (*s.suspended.Load())[k.Account()]; ok {
		return nil, suspended(a)
	}
	return k, nil
}

// wellFormed reports whether p has the shape of a relay key.
func wellFormed(p string) bool {
	if len(p) != keyLen || !strings.HasPrefix(p, keyPrefix) {
		return false
	}
	for i := len(keyPrefix); i < len(p); i++ {
		c := p[i]
		if !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// newPlaintext returns a new random key.
func newPlaintext() (string, error) {
	var b [keyRandomSize]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("keys: generate key: %w", err)
	}
	return keyPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// newID returns a new random key id of 16 hex characters.
func newID() (string, error) {
	var b [idBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("keys: generate key id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

var idPattern = regexp.MustCompile(`^[0-9a-f]{16}$`)

// notFound returns the ErrNotFound error for id. Ids that do not look like
// key ids are quoted, since they come from callers and end up in logs.
func notFound(id string) error {
	if !idPattern.MatchString(id) {
		id = quoteShort(id)
	}
	return fmt.Errorf("%w: %s", ErrNotFound, id)
}

// keyColumns lists the columns scanKey reads, in order.
const keyColumns = `id, key_hash, prefix, name, scopes, client_ids, scoped_user_id, client_users, expires_at, enabled, created_at, revoked_at, created_by, account_id`

// scanner is implemented by *sql.Row and *sql.Rows.
type scanner interface {
	Scan(dest ...any) error
}

// scanKey reads one row of keyColumns.
func scanKey(sc scanner) (Key, [sha256.Size]byte, error) {
	var (
		k                              Key
		h                              [sha256.Size]byte
		hash                           []byte
		scopes, clientIDs, clientUsers string
		expires, revoked               sql.NullString
		created                        string
		enabled                        int
	)
	if err := sc.Scan(&k.ID, &hash, &k.Prefix, &k.Name, &scopes, &clientIDs, &k.ScopedUserID,
		&clientUsers, &expires, &enabled, &created, &revoked, &k.CreatedBy, &k.AccountID); err != nil {
		return Key{}, h, err
	}
	if len(hash) != len(h) {
		return Key{}, h, fmt.Errorf("key %s: hash has %d bytes", k.ID, len(hash))
	}
	copy(h[:], hash)
	if err := json.Unmarshal([]byte(scopes), &k.Scopes); err != nil {
		return Key{}, h, fmt.Errorf("key %s: scopes: %w", k.ID, err)
	}
	if err := json.Unmarshal([]byte(clientIDs), &k.ClientIDs); err != nil {
		return Key{}, h, fmt.Errorf("key %s: client ids: %w", k.ID, err)
	}
	if err := json.Unmarshal([]byte(clientUsers), &k.ClientUsers); err != nil {
		return Key{}, h, fmt.Errorf("key %s: client users: %w", k.ID, err)
	}
	if len(k.ClientIDs) == 0 {
		k.ClientIDs = nil
	}
	if len(k.ClientUsers) == 0 {
		k.ClientUsers = nil
	}
	k.Enabled = enabled != 0
	var err error
	if k.CreatedAt, err = parseTime(created); err != nil {
		return Key{}, h, fmt.Errorf("key %s: created_at: %w", k.ID, err)
	}
	if expires.Valid {
		if k.ExpiresAt, err = parseTime(expires.String); err != nil {
			return Key{}, h, fmt.Errorf("key %s: expires_at: %w", k.ID, err)
		}
	}
	if revoked.Valid {
		if k.RevokedAt, err = parseTime(revoked.String); err != nil {
			return Key{}, h, fmt.Errorf("key %s: revoked_at: %w", k.ID, err)
		}
	}
	return k, h, nil
}

// encodeLists returns the JSON columns of k.
func encodeLists(k Key) (scopes, clientIDs, clientUsers string, err error) {
	enc := func(v any) string {
		if err != nil {
			return ""
		}
		var b []byte
		b, err = json.Marshal(v)
		return string(b)
	}
	ids := k.ClientIDs
	if ids == nil {
		ids = []string{}
	}
	users := k.ClientUsers
	if users == nil {
		users = map[string]string{}
	}
	scopes, clientIDs, clientUsers = enc(k.Scopes), enc(ids), enc(users)
	return scopes, clientIDs, clientUsers, err
}

// formatTime encodes t (in UTC) for a TEXT column.
func formatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// nullTime encodes t for a nullable TEXT column; zero becomes NULL.
func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return formatTime(t)
}

// parseTime decodes a TEXT column written by formatTime.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	return normTime(t), nil
}
