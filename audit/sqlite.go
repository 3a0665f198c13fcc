package audit

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tabletop-relay/relay/sqlitedb"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// schemaTable records this package's applied migrations: relay.db is
// shared with the key store and the linked worlds, which keep their own.
const schemaTable = "audit_schema_version"

// SQLiteStore is the [Store] of a node alone: a table of relay.db
// (`audit_records`), over its own connection to the file. A record's ID
// is its row number, which only grows, so a cursor is the last ID a page
// showed.
type SQLiteStore struct {
	db *sql.DB
}

var _ Store = (*SQLiteStore)(nil)

// OpenSQLite opens (creating if needed) the database at path, normally
// <data>/relay.db, and applies this package's pending migrations.
func OpenSQLite(path string) (*SQLiteStore, error) {
	db, err := sqlitedb.Open(path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	ms, err := sqlitedb.Migrations(migrationFS, "migrations")
	if err == nil {
		err = sqlitedb.Migrate(context.Background(), db, sqlitedb.Versions{
			Table:         schemaTable,
			AppliedAtType: "INTEGER",
			AppliedAt:     func() any { return time.Now().UnixMilli() },
		}, ms)
	}
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	return &SQLiteStore{db: db}, nil
}

// Close closes the database.
func (s *SQLiteStore) Close() error { return s.db.Close() }

// Append implements Store.
func (s *SQLiteStore) Append(ctx context.Context, e Entry) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO audit_records
		(at, account, key_id, session, address, action, target, outcome, detail, request_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.Time.UnixNano(), e.Account, e.KeyID, e.Session, e.Address, e.Action, e.Target, e.Outcome, e.Detail, e.RequestID)
	return err
}

// List implements Store.
func (s *SQLiteStore) List(ctx context.Context, q Query) (Page, error) {
	var where []string
	var args []any
	if q.Cursor != "" {
		after, err := strconv.ParseInt(q.Cursor, 10, 64)
		if err != nil || after < 0 {
			return Page{}, ErrInvalidCursor
		}
		where, args = append(where, "seq > ?"), append(args, after)
	}
	if q.Account != "" {
		where, args = append(where, "account = ?"), append(args, q.Account)
	}
	if !q.Since.IsZero() {
		where, args = append(where, "at >= ?"), append(args, q.Since.UnixNano())
	}
	if !q.Until.IsZero() {
		where, args = append(where, "at <= ?"), append(args, q.Until.UnixNano())
	}
	if q.Action != "" {
		where, args = append(where, "(action = ? OR substr(action, 1, ?) = ?)"), append(args, q.Action, len(q.Action)+1, q.Action+".")
	}
	stmt := `SELECT seq, at, account, key_id, session, address, action, target, outcome, detail, request_id FROM audit_records`
	if len(where) > 0 {
		stmt += " WHERE " + strings.Join(where, " AND ")
	}
	// One row more than the page tells whether there is a next page.
	stmt += " ORDER BY seq LIMIT ?"
	args = append(args, q.Limit+1)
	rows, err := s.db.QueryContext(ctx, stmt, args...)
	if err != nil {
		return Page{}, err
	}
	defer rows.Close()
	var page Page
	for rows.Next() {
		var e Entry
		var seq, at int64
		if err := rows.Scan(&seq, &at, &e.Account, &e.KeyID, &e.Session, &e.Address, &e.Action, &e.Target, &e.Outcome, &e.Detail, &e.RequestID); err != nil {
			return Page{}, err
		}
		if len(page.Records) == q.Limit {
			page.NextCursor = page.Records[len(page.Records)-1].ID
			break
		}
		e.ID, e.Time = strconv.FormatInt(seq, 10), time.Unix(0, at).UTC()
		page.Records = append(page.Records, e)
	}
	return page, rows.Err()
}

// Prune implements Store.
func (s *SQLiteStore) Prune(ctx context.Context, before time.Time, keep int) (int, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM audit_records WHERE at < ?`, before.UnixNano())
	if err != nil {
		return 0, err
	}
	aged, _ := res.RowsAffected()
	res, err = s.db.ExecContext(ctx, `DELETE FROM audit_records WHERE seq <= (SELECT MAX(seq) FROM audit_records) - ?`, keep)
	if err != nil {
		return int(aged), err
	}
	counted, _ := res.RowsAffected()
	return int(aged + counted), nil
}
