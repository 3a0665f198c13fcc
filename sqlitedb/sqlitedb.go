// Package sqlitedb opens the relay's own SQLite databases (relay.db, which
// the key store and the linked-world store share) with one set of
// settings, and applies each package's embedded schema migrations. Errors
// carry no package prefix: callers add theirs.
package sqlitedb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver
)

// Open opens, creating it if needed, the SQLite database at file: a new
// file gets mode 0600 and a new directory 0700 (SQLite gives the -wal and
// -shm files the database file's mode). The connection uses WAL
// journaling, synchronous=FULL, busyTimeout and immediate transactions,
// and the pool holds a single connection: SQLite allows one writer, and
// one connection keeps the pragmas and the transaction order simple.
func Open(file string, busyTimeout time.Duration) (*sql.DB, error) {
	if file == "" {
		return nil, errors.New("database path is empty")
	}
	if strings.ContainsRune(file, '?') || strings.HasPrefix(file, "file:") {
		return nil, fmt.Errorf("database path %q must be a plain file name", file)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return nil, fmt.Errorf("create database file: %w", err)
	}
	if f, err := os.OpenFile(file, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	} else if !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("create database file: %w", err)
	}
	dsn := file + "?" + strings.Join([]string{
		"_pragma=busy_timeout(" + strconv.FormatInt(busyTimeout.Milliseconds(), 10) + ")",
		"_pragma=journal_mode(WAL)",
		"_pragma=synchronous(FULL)",
		"_txlock=immediate",
	}, "&")
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	return db, nil
}

// Migration is one schema migration.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

var migrationName = regexp.MustCompile(`^(\d+)_[a-z0-9_]+\.sql$`)

// Migrations reads the migrations in directory dir of fsys, ordered by
// version. File names are "<version>_<description>.sql" with consecutive
// versions from 1.
func Migrations(fsys fs.FS, dir string) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, err
	}
	var ms []Migration
	for _, e := range entries {
		m := migrationName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("badly named migration %q", e.Name())
		}
		v, err := strconv.Atoi(m[1])
		if err != nil {
			return nil, fmt.Errorf("badly named migration %q: %w", e.Name(), err)
		}
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, Migration{Version: v, Name: e.Name(), SQL: string(body)})
	}
	slices.SortFunc(ms, func(a, b Migration) int { return a.Version - b.Version })
	for i, m := range ms {
		if m.Version != i+1 {
			return nil, fmt.Errorf("migration %q has version %d, want %d", m.Name, m.Version, i+1)
		}
	}
	return ms, nil
}

// Versions is where a package records the migrations it applied: relay.db
// is shared, so each package has a table of its own.
type Versions struct {
	// Table is the table's name.
	Table string
	// AppliedAtType is the SQL type of its applied_at column.
	AppliedAtType string
	// AppliedAt is the value recorded when a migration is applied.
	AppliedAt func() any
}

// Migrate applies, in order and each in its own (immediate) transaction,
// every migration newer than the version recorded in v's table. The
// version check happens inside the transaction, so two processes opening
// the database at once do not both apply one. It refuses a database
// written by a newer version of the program.
func Migrate(ctx context.Context, db *sql.DB, v Versions, ms []Migration) error {
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+v.Table+` (
		version    INTEGER PRIMARY KEY,
		name       TEXT NOT NULL,
		applied_at `+v.AppliedAtType+` NOT NULL
	)`); err != nil {
		return fmt.Errorf("create %s: %w", v.Table, err)
	}
	for _, m := range ms {
		if err := apply(ctx, db, v, m, len(ms)); err != nil {
			return err
		}
	}
	return nil
}

// apply runs one migration unless it has been applied already.
func apply(ctx context.Context, db *sql.DB, v Versions, m Migration, latest int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	defer tx.Rollback()
	var current int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+v.Table).Scan(&current); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if current > latest {
		return fmt.Errorf("database schema version %d is newer than this program supports (%d)", current, latest)
	}
	if current >= m.Version {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+v.Table+` (version, name, applied_at) VALUES (?, ?, ?)`,
		m.Version, m.Name, v.AppliedAt()); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	return nil
}
