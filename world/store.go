package world

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"unsafe"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// The store keeps one world in one SQLite file. It is deliberately dumb: a
// table of top-level documents as JSON rows and a table of settings. All
// rules live in the engine, which holds every document in memory and uses the
// store only to load at start and to write each transaction through.

//go:embed schema.sql
var schemaSQL string

// schemaVersion is the PRAGMA user_version this code writes and understands.
const schemaVersion = 1

// Connection settings, applied by the driver to every connection:
//   - WAL lets a reader (such as Host.List peeking at the settings) work
//     next to the writer;
//   - synchronous=FULL makes every acknowledged commit survive a crash or a
//     power loss;
//   - the busy timeout waits out such a reader instead of failing;
//   - BEGIN IMMEDIATE takes the write lock when a transaction starts, so a
//     transaction never fails half-way for want of it.
const dsnParams = "_txlock=immediate" +
	"&_pragma=busy_timeout(10000)" +
	"&_pragma=journal_mode(WAL)" +
	"&_pragma=synchronous(FULL)" +
	"&_pragma=foreign_keys(1)"

// store is a world's SQLite database.
type store struct {
	db *sql.DB
	// Prepared statements of the writes every commit makes.
	upsert, remove, record *sql.Stmt
	// recordBatch inserts journalRowsPerInsert journal records at once.
	recordBatch *sql.Stmt
	// failWrite, when set (by tests), is called before each group is
	// written; an error fails the write.
	failWrite func(group []*commitReq) error
	// scratch is where the committer puts together a row to write (see
	// row), reused: SQLite copies what it is given.
	scratch []byte
	// trimmedTo is the lowest journal sequence kept by the last deletion
	// of old records (see journalTrimBatch); 0 before the first one.
	trimmedTo uint64
	// untrimmedBytes counts the bytes of journal records written since
	// that deletion (see journalTrimBytes).
	untrimmedBytes int64
}

// row is one top-level document as stored. A nil data deletes the row.
// When cutTo is set, what is stored is data without data[cutFrom:cutTo]
// (a commit's rows are its full readers' JSON, whose `uuid` member the
// stored row leaves out; see encodeTop).
type row struct {
	collection     string
	id             string
	data           []byte
	cutFrom, cutTo int
}

// openStore opens the database at path, creating the file only when create
// is set, and makes sure the schema is in place.
func openStore(path string, create bool) (*store, error) {
	mode := "rw"
	if create {
		mode = "rwc"
	}
	db, err := sql.Open("sqlite", "file:"+escapeURIPath(path)+"?mode="+mode+"&"+dsnParams)
	if err != nil {
		return nil, err
	}
	// One connection: SQLite has one writer anyway, and a single connection
	// keeps the per-connection pragmas in force and the writes in order.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	s := &store{db: db}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.prepare(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// escapeURIPath escapes the characters that would end or alter the path of
// an SQLite URI filename.
func escapeURIPath(p string) string {
	return strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23").Replace(p)
}

// migrate creates the schema of a new database and refuses one written by
// a newer version of the relay.
func (s *store) migrate() error {
	var version int
	if err := s.db.QueryRow("PRAGMA user_version").Scan(&version); err != nil {
		return err
	}
	if version > schemaVersion {
		return fmt.Errorf("database schema version %d is newer than this relay's %d", version, schemaVersion)
	}
	if _, err := s.db.Exec(schemaSQL); err != nil {
		return fmt.Errorf("creating the schema: %w", err)
	}
	if version < schemaVersion {
		if _, err := s.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return err
		}
	}
	return nil
}

// loadMeta reads every setting, but not the idempotency records kept in
// the same table (idempotency.go).
func (s *store) loadMeta(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, "SELECT key, value FROM meta WHERE key < ? OR key >= ?", metaIdempotencyPrefix, metaIdempotencyEnd)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	meta := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		meta[k] = v
	}
	return meta, rows.Err()
}

// loadDocuments calls fn with every stored document row.
func (s *store) loadDocuments(ctx context.Context, fn func(collection, id string, data []byte) error) error {
	rows, err := s.db.QueryContext(ctx, "SELECT collection, id, data FROM documents")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var c, id string
		var data []byte
		if err := rows.Scan(&c, &id, &data); err != nil {
			return err
		}
		if err := fn(c, id, data); err != nil {
			return err
		}
	}
	return rows.Err()
}

// write stores rows and settings in one transaction: all of them or, on any
// error, none.
func (s *store) write(ctx context.Context, rows []row, meta map[string]string) error {
	return s.writeGroup(ctx, []*commitReq{{rows: rows, meta: meta}})
}

// writeGroup stores the rows, settings and journal records of a group of
// transactions, in order, in one SQLite transaction (one fsync): all of
// them or, on any error, none. A document written by several transactions
// of the group is written once, in its last version.
func (s *store) writeGroup(ctx context.Context, group []*commitReq) (err error) {
	if s.failWrite != nil {
		if err := s.failWrite(group); err != nil {
			return err
		}
	}
	empty := true
	for _, req := range group {
		empty = empty && req.empty()
	}
	if empty {
		return nil
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, ignoreDone(tx.Rollback()))
		}
	}()
	last := map[rowKey]int{} // where each document's last version is
	for gi, req := range group {
		for _, meta := range []map[string]string{req.meta, req.replMeta} {
			for k, v := range meta {
				if isIdempotencyDeletion(k, v) {
					if _, err := tx.ExecContext(ctx, "DELETE FROM meta WHERE key = ?", k); err != nil {
						return err
					}
					continue
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value", k, v); err != nil {
					return err
				}
			}
		}
		for ri, r := range req.rows {
			last[rowKey{r.collection, r.id}] = gi<<32 | ri
		}
	}
	upsert, remove := tx.StmtContext(ctx, s.upsert), tx.StmtContext(ctx, s.remove)
	for gi, req := range group {
		for ri, r := range req.rows {
			if last[rowKey{r.collection, r.id}] != gi<<32|ri {
				continue
			}
			if r.data == nil {
				_, err = remove.ExecContext(ctx, r.collection, r.id)
			} else {
				data := r.data
				if r.cutTo > 0 {
					s.scratch = append(append(s.scratch[:0], data[:r.cutFrom]...), data[r.cutTo:]...)
					data = s.scratch
				}
				// TEXT: a []byte would be a BLOB. The string shares the
				// bytes rather than copying a whole document per write:
				// a row's bytes never change, and the scratch buffer does
				// only once SQLite, which copies what it is bound, has run
				// the statement.
				_, err = upsert.ExecContext(ctx, r.collection, r.id, unsafe.String(unsafe.SliceData(data), len(data)))
			}
			if err != nil {
				return err
			}
		}
	}
	var keepFrom uint64
	var written int64 // the bytes of journal records this commit adds
	// The journal's records go in journalRowsPerInsert at a time (one
	// statement for several rows costs little more than one for a row),
	// the rest one by one.
	journal, batch := tx.StmtContext(ctx, s.record), tx.StmtContext(ctx, s.recordBatch)
	args := make([]any, 0, 2*journalRowsPerInsert)
	for _, req := range group {
		for _, r := range req.journal.records {
			written += int64(len(r.Data))
			args = append(args, clampSeq(r.Seq), r.Data)
			if len(args) == cap(args) {
				if _, err := batch.ExecContext(ctx, args...); err != nil {
					return err
				}
				args = args[:0]
			}
		}
		keepFrom = max(keepFrom, req.journal.keepFrom)
	}
	for i := 0; i < len(args); i += 2 {
		if _, err := journal.ExecContext(ctx, args[i], args[i+1]); err != nil {
			return err
		}
	}
	trimmed, untrimmed := s.trimmedTo, s.untrimmedBytes+written
	if keepFrom > trimmed && (trimmed == 0 || keepFrom >= trimmed+journalTrimBatch || untrimmed >= journalTrimBytes) {
		if _, err := tx.ExecContext(ctx, "DELETE FROM journal WHERE seq < ?", clampSeq(keepFrom)); err != nil {
			return err
		}
		trimmed, untrimmed = keepFrom, 0
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.trimmedTo, s.untrimmedBytes = trimmed, untrimmed
	return nil
}

// journalRowsPerInsert is how many journal records one statement inserts.
const journalRowsPerInsert = 8

// journalTrimBatch is how many journal records may stay below the lowest
// one to keep before they are deleted: deleting them a few at a time, with
// every commit, rebalanced the table's B-tree each time (3 % of an
// update's CPU); a batch frees whole pages at once. Readers of the journal
// take what they ask for by sequence, so the records left a while longer
// do no harm.
const journalTrimBatch = 256

// journalTrimBytes is how many bytes of journal records may be written
// before the records below the lowest one to keep are deleted, however
// few they are: large events (the hub keeps them within a byte budget)
// must not pile up journalTrimBatch deep on disk.
const journalTrimBytes = 4 << 20

// rowKey identifies a document row.
type rowKey struct{ collection, id string }

// ignoreDone drops the error a rollback reports when the transaction is
// already over.
func ignoreDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return nil
	}
	return err
}

// prepare prepares the statements of the writes.
func (s *store) prepare() (err error) {
	prep := func(query string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = s.db.Prepare(query)
		return st
	}
	s.upsert = prep("INSERT INTO documents (collection, id, data) VALUES (?, ?, ?) ON CONFLICT (collection, id) DO UPDATE SET data = excluded.data")
	s.remove = prep("DELETE FROM documents WHERE collection = ? AND id = ?")
	s.record = prep("INSERT INTO journal (seq, data) VALUES (?, ?) ON CONFLICT (seq) DO UPDATE SET data = excluded.data")
	s.recordBatch = prep("INSERT INTO journal (seq, data) VALUES (?, ?)" + strings.Repeat(", (?, ?)", journalRowsPerInsert-1) + " ON CONFLICT (seq) DO UPDATE SET data = excluded.data")
	return err
}

// close checkpoints the write-ahead log and closes the database.
func (s *store) close() error {
	for _, st := range []*sql.Stmt{s.upsert, s.remove, s.record, s.recordBatch} {
		if st != nil {
			st.Close()
		}
	}
	return s.db.Close()
}
