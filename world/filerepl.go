package world

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// Replicated file areas. In a cluster the bytes of each file a world's
// file area receives are stored by the cluster (FileStore: a JetStream
// object store per world) under a name used once, and the file's path,
// that object's name, its digest and size are recorded in the world's
// meta as `file:<path>`, through the committer, so that the record goes
// into the world's log with the same fencing as any other group: a host
// that was replaced cannot record a file. The meta entries are the
// world's file manifest; a base carries them like any other setting, and
// followers fetch the objects the records name into their copy's file
// area (see FileChanges).
//
// An object is stored before its record and deleted after the record that
// replaces it: a follower that finds an object gone knows that a later
// record of the log sets that path again.

// FileStore keeps the bytes of the files of replicated worlds. A
// Replicator that is also a FileStore replicates the worlds' file areas.
type FileStore interface {
	// PutFile stores the size bytes read from r as object of world
	// clientID. It refuses when this node no longer serves the world.
	PutFile(ctx context.Context, clientID, object string, size int64, r io.Reader) error
	// DeleteFile deletes an object of world clientID; a missing one is
	// not an error.
	DeleteFile(ctx context.Context, clientID, object string) error
}

// metaFilePrefix starts the meta keys of the file manifest; such a key
// set to the empty string is removed.
const metaFilePrefix = "file:"

// FileRecord is an entry of a world's file manifest: the file at Path is
// the object Object of the world's file store, of Digest ("sha256:" and
// hex) and Size. An empty Object records the file's removal.
type FileRecord struct {
	Path   string `json:"-"`
	Object string `json:"object"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// fileStore is the engine's file store, or nil when its world's files are
// not replicated.
func (e *Engine) fileStore() FileStore {
	fs, _ := e.replicator.(FileStore)
	return fs
}

// ReplicatesFiles reports whether the world's file area is replicated, so
// that every change to it must be recorded (RecordFile).
func (e *Engine) ReplicatesFiles() bool { return e.fileStore() != nil }

// RecordFile records the file at path (digest and size as given; open
// reads its bytes) in the replicated world before it takes its place in
// the file area: the bytes go to the file store, then the manifest entry
// into the world's log. The object the path had before is deleted once
// the new record is in. Callers serialise the records of one world's
// files (files.WriteOptions.Record does). Without replication it does
// nothing.
func (e *Engine) RecordFile(ctx context.Context, path, digest string, size int64, open func() (io.ReadCloser, error)) error {
	fs := e.fileStore()
	if fs == nil {
		return nil
	}
	if err := e.ready(); err != nil {
		return err
	}
	before, err := e.recordedFile(ctx, path)
	if err != nil {
		return err
	}
	rec := FileRecord{Path: path, Object: rand.Text(), Digest: digest, Size: size}
	body, err := open()
	if err != nil {
		return Wrapf(ErrUnavailable, err, "Could not read the file %s back", path)
	}
	err = fs.PutFile(ctx, e.info.ClientID, rec.Object, size, body)
	body.Close()
	if err != nil {
		return Wrapf(ErrUnavailable, err, "World %s could not store the file %s in the cluster", e.info.ClientID, path)
	}
	if err := e.recordFiles(ctx, rec); err != nil {
		// The object was never recorded: nobody will look for it.
		_ = fs.DeleteFile(context.WithoutCancel(ctx), e.info.ClientID, rec.Object)
		return err
	}
	if before.Object != "" {
		_ = fs.DeleteFile(context.WithoutCancel(ctx), e.info.ClientID, before.Object)
	}
	return nil
}

// recordFiles commits manifest entries, which the committer replicates.
func (e *Engine) recordFiles(ctx context.Context, recs ...FileRecord) error {
	meta := make(map[string]string, len(recs))
	for _, r := range recs {
		meta[metaFilePrefix+r.Path] = encodeFileRecord(r)
	}
	return e.mutate(ctx, meta, func(*Tx) error { return nil })
}

// encodeFileRecord is a manifest entry's meta value: empty for a removal.
func encodeFileRecord(r FileRecord) string {
	if r.Object == "" {
		return ""
	}
	b, _ := json.Marshal(r)
	return string(b)
}

// decodeFileRecord reverses encodeFileRecord for the meta key key.
func decodeFileRecord(key, value string) (FileRecord, error) {
	r := FileRecord{Path: strings.TrimPrefix(key, metaFilePrefix)}
	if value == "" {
		return r, nil
	}
	if err := json.Unmarshal([]byte(value), &r); err != nil || r.Object == "" {
		return FileRecord{}, errors.Join(errBadRecord, err)
	}
	return r, nil
}

// recordedFile is the manifest's entry for path (Object empty when none).
func (e *Engine) recordedFile(ctx context.Context, path string) (FileRecord, error) {
	var value string
	err := e.store.db.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = ?", metaFilePrefix+path).Scan(&value)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return FileRecord{}, Wrapf(ErrUnavailable, err, "Could not read the file manifest of world %s", e.info.ClientID)
	}
	return decodeFileRecord(metaFilePrefix+path, value)
}

// RecordedFiles calls fn with every entry of the world's file manifest.
func (e *Engine) RecordedFiles(ctx context.Context, fn func(FileRecord) error) error {
	// The entries are read first: fn may record files, which needs the
	// store's one connection.
	rows, err := e.store.db.QueryContext(ctx, "SELECT key, value FROM meta WHERE key >= ? AND key < ?", metaFilePrefix, metaFileEnd)
	if err != nil {
		return err
	}
	var recs []FileRecord
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return err
		}
		r, err := decodeFileRecord(k, v)
		if err != nil {
			rows.Close()
			return err
		}
		recs = append(recs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, r := range recs {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

// metaFileEnd is the first key after every key of the manifest.
const metaFileEnd = "file;"

// isFileKey reports whether a meta key is a manifest entry's.
func isFileKey(k string) bool { return strings.HasPrefix(k, metaFilePrefix) }

// FileChanges lists the file operations of a record of a world's log, in
// the order they apply: each path set to an object (Object set) or
// removed (Object empty). restart is true when the record starts a new
// base: the copy's file area is emptied first, then the entries of the
// base's records fill it.
func FileChanges(record []byte) (changes []FileRecord, restart bool, err error) {
	rec, err := decodeRecord(record)
	if err != nil {
		return nil, false, err
	}
	restart = rec.kind == recordBase && rec.flags&baseFirst != 0
	for k, v := range rec.meta {
		if !isFileKey(k) {
			continue
		}
		r, err := decodeFileRecord(k, v)
		if err != nil {
			return nil, false, err
		}
		changes = append(changes, r)
	}
	return changes, restart, nil
}
