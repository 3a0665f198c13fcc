package link

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tabletop-relay/relay/sqlitedb"
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
	db, err := sqlitedb.Open(path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("link: %w", err)
	}
	s := &SQLiteStore{db: db}
	if err := s.migrate(context.Background()); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// migrate applies every embedded migration newer than the recorded version
// (see sqlitedb.Migrate).
func (s *SQLiteStore) migrate(ctx context.Context) error {
	ms, err := sqlitedb.Migrations(migrationFS, "migrations")
	if err == nil {
		err = sqlitedb.Migrate(ctx, s.db, sqlitedb.Versions{
			Table:         schemaTable,
			AppliedAtType: "INTEGER",
			AppliedAt:     func() any { return time.Now().UnixMilli() },
		}, ms)
	}
	if err != nil {
		return fmt.Errorf("link: %w", err)
	}
	return nil
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
	if _, err := tx.ExecContext(ctx, `INSERT INTO link_pairing_codes (code_hash, client_id, created_by, created_at, expires_at, account_id)
		VALUES (?, ?, ?, ?, ?, ?)`, c.Hash[:], c.ClientID, c.CreatedBy, c.CreatedAt.UnixMilli(), c.ExpiresAt.UnixMilli(), c.Account); err != nil {
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
		RETURNING client_id, created_by, created_at, expires_at, account_id`, h[:]).Scan(&c.ClientID, &c.CreatedBy, &created, &expires, &c.Account)
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

const worldColumns = `client_id, world_id, world_title, server_fingerprint, server_origin, paired_at, unpaired_at, account_id`

// scanWorld reads one row of worldColumns.
func scanWorld(sc interface{ Scan(...any) error }) (World, error) {
	var (
		w        World
		paired   int64
		unpaired sql.NullInt64
	)
	if err := sc.Scan(&w.ClientID, &w.WorldID, &w.WorldTitle, &w.ServerFingerprint, &w.ServerOrigin, &paired, &unpaired, &w.Account); err != nil {
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
		paired_at = excluded.paired_at, unpaired_at = NULL, account_id = excluded.account_id`
	if p.New {
		upsert = ""
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO link_worlds (`+worldColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, ?)`+upsert,
		w.ClientID, w.WorldID, w.WorldTitle, w.ServerFingerprint, w.ServerOrigin, w.PairedAt.UnixMilli(), w.Account); err != nil {
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

// Export returns every linked world, paired or not, each with its valid
// token (a zero Token for an unpaired world), in clientId order: a single
// node that joins a cluster hands its linked worlds to the cluster's store
// with it, so that its tabletops keep their clientIds and tokens.
func (s *SQLiteStore) Export(ctx context.Context) ([]Pairing, error) {
	worlds, err := s.Worlds(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Pairing, 0, len(worlds))
	for _, w := range worlds {
		p := Pairing{World: w, New: true}
		var hash []byte
		var created int64
		err := s.db.QueryRowContext(ctx, `SELECT token_hash, created_at FROM link_tokens
			WHERE client_id = ? AND revoked_at IS NULL ORDER BY created_at DESC LIMIT 1`, w.ClientID).Scan(&hash, &created)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("link: export tokens: %w", err)
		default:
			copy(p.Token.Hash[:], hash)
			p.Token.ClientID, p.Token.CreatedAt = w.ClientID, time.UnixMilli(created).UTC()
		}
		out = append(out, p)
	}
	return out, nil
}
