package signin

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tabletop-relay/relay/sqlitedb"
)

// Errors of a [KV].
var (
	// ErrNoEntry is returned by Get for a key with no entry.
	ErrNoEntry = errors.New("signin: no such entry")
	// ErrEntryExists is returned by Create for a key that has an entry.
	ErrEntryExists = errors.New("signin: entry exists")
	// ErrChanged is returned by Update when the entry is no longer at the
	// given revision (or is gone).
	ErrChanged = errors.New("signin: entry changed meanwhile")
)

// KV is where the sign-in state lives: relay.db's table on a relay alone
// ([SQLiteKV]), the cluster's bucket in a cluster (package cluster/shared),
// so that every node accepts every session and invite. Keys are dotted
// names of letters, digits, '_' and '-'; every change of an entry is a
// compare-and-set on its revision.
type KV interface {
	// Get returns the entry's value and revision, or ErrNoEntry.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Create adds an entry, or fails with ErrEntryExists.
	Create(ctx context.Context, key string, value []byte) error
	// Update replaces the entry at revision, or fails with ErrChanged.
	Update(ctx context.Context, key string, value []byte, revision uint64) error
	// Delete removes the entry; a missing one is no error.
	Delete(ctx context.Context, key string) error
	// Keys lists the keys that start with prefix, which ends with a dot.
	Keys(ctx context.Context, prefix string) ([]string, error)
}

//go:embed migrations/*.sql
var migrationFS embed.FS

// SQLiteKV is the [KV] of a relay alone: a table of relay.db.
type SQLiteKV struct{ db *sql.DB }

var _ KV = (*SQLiteKV)(nil)

// OpenSQLite opens (creating it if needed) the sign-in table of the
// SQLite database at path.
func OpenSQLite(path string) (*SQLiteKV, error) {
	db, err := sqlitedb.Open(path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("signin: %w", err)
	}
	ms, err := sqlitedb.Migrations(migrationFS, "migrations")
	if err == nil {
		err = sqlitedb.Migrate(context.Background(), db, sqlitedb.Versions{
			Table:         "signin_schema",
			AppliedAtType: "INTEGER",
			AppliedAt:     func() any { return time.Now().UnixMilli() },
		}, ms)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("signin: %w", err)
	}
	return &SQLiteKV{db: db}, nil
}

// Close closes the database.
func (s *SQLiteKV) Close() error { return s.db.Close() }

// Get implements [KV].
func (s *SQLiteKV) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	var value []byte
	var rev uint64
	err := s.db.QueryRowContext(ctx, `SELECT value, revision FROM signin_entries WHERE key = ?`, key).Scan(&value, &rev)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, ErrNoEntry
	}
	if err != nil {
		return nil, 0, fmt.Errorf("signin: read %s: %w", key, err)
	}
	return value, rev, nil
}

// Create implements [KV].
func (s *SQLiteKV) Create(ctx context.Context, key string, value []byte) error {
	res, err := s.db.ExecContext(ctx, `INSERT INTO signin_entries (key, value, revision) VALUES (?, ?, 1) ON CONFLICT (key) DO NOTHING`, key, value)
	if err != nil {
		return fmt.Errorf("signin: create %s: %w", key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrEntryExists
	}
	return nil
}

// Update implements [KV].
func (s *SQLiteKV) Update(ctx context.Context, key string, value []byte, revision uint64) error {
	res, err := s.db.ExecContext(ctx, `UPDATE signin_entries SET value = ?, revision = revision + 1 WHERE key = ? AND revision = ?`, value, key, revision)
	if err != nil {
		return fmt.Errorf("signin: update %s: %w", key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return ErrChanged
	}
	return nil
}

// Delete implements [KV].
func (s *SQLiteKV) Delete(ctx context.Context, key string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM signin_entries WHERE key = ?`, key); err != nil {
		return fmt.Errorf("signin: delete %s: %w", key, err)
	}
	return nil
}

// Keys implements [KV].
func (s *SQLiteKV) Keys(ctx context.Context, prefix string) ([]string, error) {
	// Keys hold no LIKE wildcards ('%', '_' is one: escaped), so a prefix
	// match is exact.
	pattern := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	rows, err := s.db.QueryContext(ctx, `SELECT key FROM signin_entries WHERE key LIKE ? ESCAPE '\' ORDER BY key`, pattern)
	if err != nil {
		return nil, fmt.Errorf("signin: list %s: %w", prefix, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("signin: list %s: %w", prefix, err)
		}
		out = append(out, k)
	}
	return out, rows.Err()
}
