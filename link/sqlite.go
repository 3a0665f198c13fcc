package link

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// schemaTable records this package's applied migrations. relay.db is shared
// with the key store, which keeps its own version table.
const schemaTable = "link_schema_version"

// SQLiteStore is the [Store] in a SQLite database, normally the relay's
// relay.db next to the API keys, in tables of its own (`link_*`). It opens
// its own connection to the file (WAL, synchronous=FULL, a busy timeout),
// so it and the key store wait for each other's writes instead of failing.
// It is safe for concurrent use.
type SQLiteStore struct {
	db *sql.DB
	// mu serialises writes, which keeps each multi-statement step atomic
	// with respect to the others in this process.
	mu sync.Mutex
}

// OpenSQLite opens (creating if needed, with mode 0600) the database at path
// and applies this package's pending migrations.
func OpenSQLite(path string) (*SQLiteStore, error) {
	if path == "" || strings.ContainsRune(path, '?') || strings.HasPrefix(path, "file:") {
		return nil, fmt.Errorf("link: database path %q must be a plain file name", path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("link: create database directory: %w", err)
	}
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("link: create database file: %w", err)
	}
	dsn := path + "?" + strings.Join([]string{
		"_pragma=busy_timeout(5000)",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(FULL)",
		"_txlock=immediate",
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("link: open database: %w", err)
	}
	// One connection, as the key store: SQLite has one writer anyway.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &SQLiteStore{db: db}
	if err := s.migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

var migrationName = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.sql$`)

// migrate applies every embedded migration newer than the recorded version,
// each in its own immediate transaction (so two processes opening the file
// at once do not both apply one), and refuses a database written by a newer
// version of this package.
func (s *SQLiteStore) migrate(ctx context.Context) error {
	entries, err := fs.ReadDir(migrationFS, "migrations")
	if err != nil {
		return err
	}
	type migration struct {
		version int
		name    string
	}
	var ms []migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return fmt.Errorf("link: badly named migration %q", e.Name())
		}
		v, _ := strconv.Atoi(m[1])
		ms = append(ms, migration{v, e.Name()})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+schemaTable+` (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("link: create %s: %w", schemaTable, err)
	}
	for i, m := range ms {
		if m.version != i+1 {
			return fmt.Errorf("link: migration %q has version %d, want %d", m.name, m.version, i+1)
		}
		body, err := migrationFS.ReadFile("migrations/" + m.name)
		if err != nil {
			return err
		}
		if err := s.apply(ctx, m.version, m.name, string(body), len(ms)); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one migration unless it was applied already.
func (s *SQLiteStore) apply(ctx context.Context, version int, name, body string, latest int) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("link: migration %s: %w", name, err)
	}
	defer tx.Rollback()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+schemaTable).Scan(&current); err != nil {
		return fmt.Errorf("link: read schema version: %w", err)
	}
	if current > latest {
		return fmt.Errorf("link: database schema version %d is newer than this program supports (%d)", current, latest)
	}
	if current >= version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, body); err != nil {
		return fmt.Errorf("link: migration %s: %w", name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+schemaTable+` (version, name, applied_at) VALUES (?, ?, ?)`,
		version, name, time.Now().UnixMilli()); err != nil {
		return fmt.Errorf("link: migration %s: %w", name, err)
	}
	return tx.Commit()
}

// SaveCode stores a new pairing code, and forgets the codes that have
// expired, so the table holds only live codes.
func (s *SQLiteStore) SaveCode(ctx context.Context, c Code) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("link: save pairing code: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM link_pairing_codes WHERE expires_at <= ?`, c.CreatedAt.UnixMilli()); err != nil {
		return fmt.Errorf("link: save pairing code: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO link_pairing_codes (code_hash, client_id, created_by, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?)`, c.Hash[:], c.ClientID, c.CreatedBy, c.CreatedAt.UnixMilli(), c.ExpiresAt.UnixMilli()); err != nil {
		return fmt.Errorf("link: save pairing code: %w", err)
	}
	return tx.Commit()
}

// TakeCode deletes the code and returns it when it was live at now.
func (s *SQLiteStore) TakeCode(ctx context.Context, h Hash, now time.Time) (Code, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Code{Hash: h}
	var created, expires int64
	err := s.db.QueryRowContext(ctx, `DELETE FROM link_pairing_codes WHERE code_hash = ?
		RETURNING client_id, created_by, created_at, expires_at`, h[:]).Scan(&c.ClientID, &c.CreatedBy, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return Code{}, ErrCodeRejected
	}
	if err != nil {
		return Code{}, fmt.Errorf("link: take pairing code: %w", err)
	}
	c.CreatedAt, c.ExpiresAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC()
	if !now.Before(c.ExpiresAt) {
		return Code{}, ErrCodeRejected
	}
	return c, nil
}

const worldColumns = `client_id, world_id, world_title, server_fingerprint, server_origin, paired_at, unpaired_at`

// scanWorld reads one row of worldColumns.
func scanWorld(sc interface{ Scan(...any) error }) (World, error) {
	var (
		w        World
		paired   int64
		unpaired sql.NullInt64
	)
	if err := sc.Scan(&w.ClientID, &w.WorldID, &w.WorldTitle, &w.ServerFingerprint, &w.ServerOrigin, &paired, &unpaired); err != nil {
		return World{}, err
	}
	w.PairedAt = time.UnixMilli(paired).UTC()
	if unpaired.Valid {
		w.UnpairedAt = time.UnixMilli(unpaired.Int64).UTC()
	}
	return w, nil
}

// World returns one linked world.
func (s *SQLiteStore) World(ctx context.Context, clientID string) (World, error) {
	w, err := scanWorld(s.db.QueryRowContext(ctx, `SELECT `+worldColumns+` FROM link_worlds WHERE client_id = ?`, clientID))
	if errors.Is(err, sql.ErrNoRows) {
		return World{}, unknownWorld(clientID)
	}
	if err != nil {
		return World{}, fmt.Errorf("link: read linked world: %w", err)
	}
	return w, nil
}

// Worlds returns every linked world.
func (s *SQLiteStore) Worlds(ctx context.Context) ([]World, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT `+worldColumns+` FROM link_worlds ORDER BY client_id`)
	if err != nil {
		return nil, fmt.Errorf("link: list linked worlds: %w", err)
	}
	defer rows.Close()
	var out []World
	for rows.Next() {
		w, err := scanWorld(rows)
		if err != nil {
			return nil, fmt.Errorf("link: list linked worlds: %w", err)
		}
		out = append(out, w)
	}
	return out, rows.Err()
}

// Pair stores the world and its only valid token in one transaction.
func (s *SQLiteStore) Pair(ctx context.Context, p Pairing) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("link: pair: %w", err)
	}
	defer tx.Rollback()
	w := p.World
	upsert := ` ON CONFLICT (client_id) DO UPDATE SET world_id = excluded.world_id, world_title = excluded.world_title,
		server_fingerprint = excluded.server_fingerprint, server_origin = excluded.server_origin,
		paired_at = excluded.paired_at, unpaired_at = NULL`
	if p.New {
		upsert = ""
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO link_worlds (`+worldColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL)`+upsert,
		w.ClientID, w.WorldID, w.WorldTitle, w.ServerFingerprint, w.ServerOrigin, w.PairedAt.UnixMilli()); err != nil {
		return fmt.Errorf("link: pair: %w", err)
	}
	now := p.Token.CreatedAt.UnixMilli()
	if _, err := tx.ExecContext(ctx, `UPDATE link_tokens SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL`, now, w.ClientID); err != nil {
		return fmt.Errorf("link: pair: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO link_tokens (token_hash, client_id, created_at) VALUES (?, ?, ?)`,
		p.Token.Hash[:], w.ClientID, now); err != nil {
		return fmt.Errorf("link: pair: %w", err)
	}
	return tx.Commit()
}

// TokenWorld returns the world of a valid token.
func (s *SQLiteStore) TokenWorld(ctx context.Context, h Hash) (string, error) {
	var clientID string
	err := s.db.QueryRowContext(ctx, `SELECT client_id FROM link_tokens WHERE token_hash = ? AND revoked_at IS NULL`, h[:]).Scan(&clientID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", ErrTokenRejected
	}
	if err != nil {
		return "", fmt.Errorf("link: read token: %w", err)
	}
	return clientID, nil
}

// Unpair revokes the world's tokens and marks it unpaired.
func (s *SQLiteStore) Unpair(ctx context.Context, clientID string, now time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("link: unpair: %w", err)
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE link_worlds SET unpaired_at = COALESCE(unpaired_at, ?) WHERE client_id = ?`, now.UnixMilli(), clientID)
	if err != nil {
		return 0, fmt.Errorf("link: unpair: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return 0, fmt.Errorf("link: unpair: %w", err)
	} else if n == 0 {
		return 0, unknownWorld(clientID)
	}
	res, err = tx.ExecContext(ctx, `UPDATE link_tokens SET revoked_at = ? WHERE client_id = ? AND revoked_at IS NULL`, now.UnixMilli(), clientID)
	if err != nil {
		return 0, fmt.Errorf("link: unpair: %w", err)
	}
	revoked, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("link: unpair: %w", err)
	}
	return int(revoked), tx.Commit()
}
