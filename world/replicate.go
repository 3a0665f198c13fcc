package world

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/tabletop-relay/relay/internal/clientid"
)

// Replication. In a cluster every committed group of an embedded world is
// appended to a log kept by the cluster (a JetStream stream per world)
// before any transaction of the group is acknowledged, and other nodes
// apply that log to copies of their own (Replica) so that one of them can
// serve the world when its host is gone. The log is the world's history;
// each node's SQLite file is a copy of it.
//
// The engine appends each group with the sequence of the last record it
// knows: a log that holds a later record (another node took the world
// over) refuses it, and the engine then stops serving the world for good.
// The first group an engine replicates is preceded by a base: the whole
// durable state of the world, in records of at most baseChunkBytes, so
// that a follower starting from an empty copy holds the world once it has
// applied the base.

// Replicator appends a world's records to its replicated log.
type Replicator interface {
	// Append appends record to the log of world clientID, provided the
	// log's last record is last (0: the log is empty), and returns the
	// sequence of the new record. Any error means the engine can no
	// longer tell what the log holds.
	Append(clientID string, last uint64, record []byte) (uint64, error)
	// Fenced is told, once, that the engine of world clientID stopped
	// serving it because an append failed (err); it must not block.
	Fenced(clientID string, err error)
}

// Meta keys of the replication state of a world's copy.
const (
	// metaReplSeq is the sequence of the last log record the copy holds.
	metaReplSeq = "replicationSeq"
	// metaReplBase names the base the copy was built from (random, one per
	// base), so that two copies of one world can be told apart from two
	// worlds of the same client id.
	metaReplBase = "replicationBase"
	// metaReplComplete is "1" once a copy applied a whole base.
	metaReplComplete = "replicationComplete"
)

// Record kinds of the replicated log.
const (
	recordGroup  byte = 'G' // one committed group
	recordBase   byte = 'B' // a part of a base
	recordMarker byte = 'M' // a new host took the world: changes nothing
)

// Flags of a base record.
const (
	baseFirst byte = 1 << iota // the copy starts over from this record
	baseLast                   // the base is whole after this record
)

// baseChunkBytes bounds the documents of one base record (a document
// larger than that travels alone), well below the payload limit of NATS
// servers (1 MiB by default).
const baseChunkBytes = 512 << 10

// logRecord is a decoded record of the log.
type logRecord struct {
	kind     byte
	flags    byte
	base     string
	meta     map[string]string
	rows     []row
	journal  []JournalRecord
	keepFrom uint64
}

// encodeRecord serialises a record: the kind, the flags, the base id,
// the settings, the rows (a nil data is a deletion), the journal records
// and the lowest journal sequence to keep.
func encodeRecord(r *logRecord) []byte {
	size := 64 + len(r.base)
	for k, v := range r.meta {
		size += len(k) + len(v) + 8
	}
	for _, w := range r.rows {
		size += len(w.collection) + len(w.id) + len(w.data) + 16
	}
	for _, j := range r.journal {
		size += len(j.Data) + 16
	}
	b := make([]byte, 0, size)
	b = append(b, r.kind, r.flags)
	b = appendString(b, r.base)
	b = binary.AppendUvarint(b, uint64(len(r.meta)))
	for k, v := range r.meta {
		b = appendString(b, k)
		b = appendString(b, v)
	}
	b = binary.AppendUvarint(b, uint64(len(r.rows)))
	for _, w := range r.rows {
		b = appendString(b, w.collection)
		b = appendString(b, w.id)
		data := w.data
		if w.cutTo > 0 {
			// The stored form: without data[cutFrom:cutTo] (see row).
			b = binary.AppendUvarint(b, uint64(len(data)-(w.cutTo-w.cutFrom))+1)
			b = append(append(b, data[:w.cutFrom]...), data[w.cutTo:]...)
			continue
		}
		if data == nil {
			b = binary.AppendUvarint(b, 0)
			continue
		}
		b = binary.AppendUvarint(b, uint64(len(data))+1)
		b = append(b, data...)
	}
	b = binary.AppendUvarint(b, uint64(len(r.journal)))
	for _, j := range r.journal {
		b = binary.AppendUvarint(b, j.Seq)
		b = binary.AppendUvarint(b, uint64(len(j.Data)))
		b = append(b, j.Data...)
	}
	return binary.AppendUvarint(b, r.keepFrom)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// errBadRecord is returned for a record that cannot be decoded.
var errBadRecord = errors.New("malformed replication record")

// recordReader takes a record apart.
type recordReader struct {
	b   []byte
	err error
}

func (d *recordReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errBadRecord
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *recordReader) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)) {
		d.err = errBadRecord
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *recordReader) string() string { return string(d.bytes(d.uvarint())) }

// count reads a number of items, each taking at least one byte.
func (d *recordReader) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.err = errBadRecord
		return 0
	}
	return int(n)
}

// decodeRecord reverses encodeRecord.
func decodeRecord(b []byte) (*logRecord, error) {
	if len(b) < 2 {
		return nil, errBadRecord
	}
	r := &logRecord{kind: b[0], flags: b[1]}
	d := &recordReader{b: b[2:]}
	r.base = d.string()
	if n := d.count(); n > 0 {
		r.meta = make(map[string]string, n)
		for range n {
			k := d.string()
			r.meta[k] = d.string()
		}
	}
	n := d.count()
	r.rows = make([]row, 0, n)
	for range n {
		w := row{collection: d.string(), id: d.string()}
		if size := d.uvarint(); size > 0 {
			w.data = d.bytes(size - 1)
			if w.data == nil {
				w.data = []byte{}
			}
		}
		r.rows = append(r.rows, w)
	}
	n = d.count()
	r.journal = make([]JournalRecord, 0, n)
	for range n {
		seq := d.uvarint()
		r.journal = append(r.journal, JournalRecord{Seq: seq, Data: d.bytes(d.uvarint())})
	}
	r.keepFrom = d.uvarint()
	if d.err != nil {
		return nil, d.err
	}
	switch r.kind {
	case recordGroup, recordBase, recordMarker:
	default:
		return nil, fmt.Errorf("%w: kind %q", errBadRecord, r.kind)
	}
	return r, nil
}

// MarkerRecord is the log record a node appends when it takes a world
// over, before it serves it: it changes nothing in the world, and any
// host that still believes it holds the world can no longer append.
func MarkerRecord() []byte { return encodeRecord(&logRecord{kind: recordMarker}) }

// replicateGroup appends a group to the world's log before it is written,
// preceded by the base when the engine has not replicated anything yet.
// It runs on the committer.
func (e *Engine) replicateGroup(group []*commitReq) error {
	rec := &logRecord{kind: recordGroup}
	force := false
	for _, req := range group {
		force = force || req.forceBase
		for k, v := range req.meta {
			if rec.meta == nil {
				rec.meta = map[string]string{}
			}
			rec.meta[k] = v
		}
		rec.rows = append(rec.rows, req.rows...)
		rec.journal = append(rec.journal, req.journal.records...)
		rec.keepFrom = max(rec.keepFrom, req.journal.keepFrom)
	}
	empty := len(rec.meta) == 0 && len(rec.rows) == 0 && len(rec.journal) == 0
	if empty && (!force || e.replSeq != 0) {
		return nil
	}
	last := group[len(group)-1]
	if e.replSeq == 0 {
		if err := e.replicateBase(); err != nil {
			return err
		}
		if empty {
			last.replMeta = map[string]string{metaReplSeq: strconv.FormatUint(e.replSeq, 10), metaReplBase: e.replBase, metaReplComplete: "1"}
			return nil
		}
	}
	seq, err := e.replicator.Append(e.info.ClientID, e.replSeq, encodeRecord(rec))
	if err != nil {
		return err
	}
	e.replSeq = seq
	last.replMeta = map[string]string{metaReplSeq: strconv.FormatUint(seq, 10), metaReplBase: e.replBase, metaReplComplete: "1"}
	return nil
}

// replicateBase appends the world's durable state (what its SQLite file
// holds, which only the committer writes) as a new base.
func (e *Engine) replicateBase() error {
	base := rand.Text()
	ctx := context.Background()
	meta, err := e.store.loadMeta(ctx)
	if err != nil {
		return err
	}
	for _, k := range []string{metaReplSeq, metaReplBase, metaReplComplete} {
		delete(meta, k)
	}
	var chunks []*logRecord
	cur := &logRecord{kind: recordBase, base: base, meta: meta}
	size := 0
	flush := func() {
		chunks = append(chunks, cur)
		cur = &logRecord{kind: recordBase, base: base}
		size = 0
	}
	// The file manifest may be long: its entries are spread over the
	// base's records like documents.
	manifest := map[string]string{}
	for k, v := range meta {
		if isFileKey(k) {
			manifest[k] = v
			delete(meta, k)
		}
	}
	for k, v := range manifest {
		if size > 0 && size+len(k)+len(v) > baseChunkBytes {
			flush()
		}
		if cur.meta == nil {
			cur.meta = map[string]string{}
		}
		cur.meta[k] = v
		size += len(k) + len(v)
	}
	err = e.store.loadDocuments(ctx, func(collection, id string, data []byte) error {
		if size > 0 && size+len(data) > baseChunkBytes {
			flush()
		}
		cur.rows = append(cur.rows, row{collection: collection, id: id, data: data})
		size += len(data)
		return nil
	})
	if err != nil {
		return err
	}
	err = e.ReadJournal(ctx, 0, func(r JournalRecord) error {
		if size > 0 && size+len(r.Data) > baseChunkBytes {
			flush()
		}
		cur.journal = append(cur.journal, r)
		size += len(r.Data)
		return nil
	})
	if err != nil {
		return err
	}
	flush()
	chunks[0].flags |= baseFirst
	chunks[len(chunks)-1].flags |= baseLast
	seq := e.replSeq
	for _, c := range chunks {
		if seq, err = e.replicator.Append(e.info.ClientID, seq, encodeRecord(c)); err != nil {
			return err
		}
	}
	e.replSeq, e.replBase = seq, base
	return nil
}

// fence stops the engine serving the world after a failed append: the log
// may hold records this copy lacks, or another node took the world over.
// It runs on the committer.
func (e *Engine) fence(err error) {
	if e.fenced.Swap(true) {
		return
	}
	e.replicator.Fenced(e.info.ClientID, err)
}

// Replica is a node's copy of a world it follows: it applies the world's
// log, record by record, in order, to a SQLite file in the world's format,
// which an engine can open once the node takes the world over.
type Replica struct {
	path     string
	st       *store
	seq      uint64
	base     string
	complete bool
}

// OpenReplica opens (creating it when needed) the copy at path.
func OpenReplica(path string) (*Replica, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	st, err := openStore(path, true)
	if err != nil {
		return nil, err
	}
	meta, err := st.loadMeta(context.Background())
	if err != nil {
		st.close()
		return nil, err
	}
	seq, _ := strconv.ParseUint(meta[metaReplSeq], 10, 64)
	return &Replica{path: path, st: st, seq: seq, base: meta[metaReplBase], complete: meta[metaReplComplete] == "1"}, nil
}

// ReplicaState reads the replication state of the world file at path
// without opening it for writing: the sequence of the last record it
// holds, its base, and whether it holds a whole base. A file that does
// not exist is the zero state.
func ReplicaState(path string) (seq uint64, base string, complete bool, err error) {
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, "", false, nil
		}
		return 0, "", false, err
	}
	st, err := openStore(path, false)
	if err != nil {
		return 0, "", false, err
	}
	defer st.close()
	meta, err := st.loadMeta(context.Background())
	if err != nil {
		return 0, "", false, err
	}
	seq, _ = strconv.ParseUint(meta[metaReplSeq], 10, 64)
	return seq, meta[metaReplBase], meta[metaReplComplete] == "1", nil
}

// Seq is the sequence of the last record the copy holds.
func (r *Replica) Seq() uint64 { return r.seq }

// Complete reports whether the copy holds a whole base and so the world.
func (r *Replica) Complete() bool { return r.complete }

// Apply applies the log record of sequence seq, which must follow the
// last one applied, in one SQLite transaction.
func (r *Replica) Apply(seq uint64, data []byte) error {
	if seq <= r.seq {
		return nil // applied before (a redelivery)
	}
	rec, err := decodeRecord(data)
	if err != nil {
		return err
	}
	base, complete := r.base, r.complete
	meta := map[string]string{}
	for k, v := range rec.meta {
		meta[k] = v
	}
	ctx := context.Background()
	switch rec.kind {
	case recordBase:
		if rec.flags&baseFirst != 0 {
			base, complete = rec.base, false
			if err := r.reset(ctx); err != nil {
				return err
			}
		} else if rec.base != base {
			return fmt.Errorf("replication record %d belongs to base %s, the copy to %s", seq, rec.base, base)
		}
		if rec.flags&baseLast != 0 {
			complete = true
		}
	case recordGroup:
		if !complete {
			// A follower that started after the base was trimmed away
			// cannot build the world from groups alone.
			return fmt.Errorf("replication record %d: the copy holds no base", seq)
		}
	}
	meta[metaReplSeq] = strconv.FormatUint(seq, 10)
	meta[metaReplBase] = base
	if complete {
		meta[metaReplComplete] = "1"
	} else {
		meta[metaReplComplete] = "0"
	}
	req := &commitReq{rows: rec.rows, meta: meta, journal: journalBatch{records: rec.journal, keepFrom: rec.keepFrom}}
	if err := r.st.writeGroup(ctx, []*commitReq{req}); err != nil {
		return err
	}
	r.seq, r.base, r.complete = seq, base, complete
	return nil
}

// Skip passes over record seq of the log without applying it (a record
// the follower refused), so that the record after it follows the copy.
func (r *Replica) Skip(seq uint64) error {
	if seq <= r.seq {
		return nil
	}
	req := &commitReq{meta: map[string]string{metaReplSeq: strconv.FormatUint(seq, 10)}}
	if err := r.st.writeGroup(context.Background(), []*commitReq{req}); err != nil {
		return err
	}
	r.seq = seq
	return nil
}

// reset empties the copy before a new base.
func (r *Replica) reset(ctx context.Context) error {
	for _, q := range []string{"DELETE FROM documents", "DELETE FROM meta", "DELETE FROM journal"} {
		if _, err := r.st.db.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	r.st.trimmedTo, r.st.untrimmedBytes = 0, 0
	return nil
}

// Close closes the copy.
func (r *Replica) Close() error { return r.st.close() }

// Snapshot writes a consistent copy of the replica, as of its last
// applied record (Seq), to a new database file at path (VACUUM INTO,
// which copies page by page and never holds the database in memory). It
// must not run while a record is being applied; a cancelled ctx
// interrupts it.
func (r *Replica) Snapshot(ctx context.Context, path string) error {
	if !r.complete {
		return fmt.Errorf("the copy at %s holds no whole base to snapshot", r.path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if _, err := r.st.db.ExecContext(ctx, "VACUUM INTO ?", path); err != nil {
		_ = os.Remove(path)
		return fmt.Errorf("snapshot of %s: %w", r.path, err)
	}
	return nil
}

// Restore replaces the copy with the world database at path, a snapshot
// of the world's copy that holds the log up to record seq: the file must
// hold a whole base and name seq as its last record. The file is moved
// into the copy's place; the copy then continues from seq.
func (r *Replica) Restore(path string, seq uint64) error {
	got, base, complete, err := ReplicaState(path)
	if err != nil {
		return fmt.Errorf("the snapshot cannot be read: %w", err)
	}
	if !complete || got != seq {
		return fmt.Errorf("the snapshot holds record %d (whole: %v), not record %d", got, complete, seq)
	}
	if err := r.st.close(); err != nil {
		return err
	}
	// The copy's own write-ahead log belongs to the file being replaced:
	// SQLite would apply it to the snapshot otherwise.
	moveErr := errors.Join(removeIfExists(r.path+"-wal"), removeIfExists(r.path+"-shm"))
	if moveErr == nil {
		moveErr = os.Rename(path, r.path)
	}
	if moveErr == nil {
		moveErr = syncDir(filepath.Dir(r.path))
	}
	// Open the copy again whatever happened, so that the replica stays
	// usable: the snapshot on success, the former copy otherwise.
	st, err := openStore(r.path, true)
	if err != nil {
		return errors.Join(moveErr, err)
	}
	r.st = st
	if moveErr != nil {
		return moveErr
	}
	r.seq, r.base, r.complete = seq, base, true
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// errFenced is the answer of an engine that stopped serving its world.
func errFenced(clientID string) error {
	return Errorf(ErrUnavailable, "World %s is unavailable: this node no longer hosts it", clientID)
}

// StartReplication makes sure the world's log holds its base, appending
// it now if the engine has not replicated anything yet, so that followers
// hold the world before its first write. It does nothing without a
// Replicator.
func (e *Engine) StartReplication(ctx context.Context) error {
	if e.replicator == nil {
		return nil
	}
	e.commits.beginWrite()
	select {
	case e.writer <- struct{}{}:
	case <-ctx.Done():
		e.commits.endWrite()
		return contextError(ctx.Err())
	}
	if err := e.ready(); err != nil {
		<-e.writer
		e.commits.endWrite()
		return err
	}
	req := &commitReq{forceBase: true, snap: e.latest, prepared: make(chan struct{}), done: make(chan struct{})}
	close(req.prepared)
	e.enqueue(req)
	<-e.writer
	<-req.done
	return req.err
}

// WorldPath is where the database of world clientID is, or would be.
func (h *Host) WorldPath(clientID string) string { return filepath.Join(h.dir, clientID, dbFile) }

// Adopt moves a world directory built elsewhere (a follower's copy,
// holding world.db) into the host's worlds, as world clientID. An existing
// world of that id is ErrConflict.
func (h *Host) Adopt(clientID, dir string) error {
	if !clientid.Valid(clientID) {
		return errUnknownWorld(clientID)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return errHostClosed()
	}
	if _, open := h.worlds[clientID]; open {
		return Errorf(ErrConflict, "World already exists: %s", clientID)
	}
	final := filepath.Join(h.dir, clientID)
	if _, err := os.Stat(final); err == nil {
		return Errorf(ErrConflict, "World already exists: %s", clientID)
	}
	if err := os.Rename(dir, final); err != nil {
		return Wrapf(ErrUnavailable, err, "Could not take world %s in", clientID)
	}
	h.forgetIDs()
	return syncDir(h.dir)
}

// Evict closes world clientID if it is open, and moves its directory to
// dir (a follower's place) unless dir is empty. The world is unknown to
// the host afterwards.
func (h *Host) Evict(clientID, dir string) error {
	h.mu.Lock()
	w := h.worlds[clientID]
	h.mu.Unlock()
	if w != nil {
		<-w.ready
		if w.eng != nil {
			_ = w.eng.Close()
		}
		h.forget(clientID, w)
	}
	if dir == "" {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if w := h.worlds[clientID]; w != nil {
		return Errorf(ErrConflict, "World %s was opened again", clientID)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return err
	}
	if err := os.Rename(filepath.Join(h.dir, clientID), dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	h.forgetIDs()
	return nil
}

// Handoff closes world clientID, if it is open, for another node to take
// it over: the writes under way finish (their groups are committed, and
// appended to the world's log, first), and the calls that reach the
// engine afterwards fail with ErrUnavailable and the message reason,
// which should tell the caller that the call was not carried out. A later
// World opens the world again.
func (h *Host) Handoff(clientID, reason string) {
	h.mu.Lock()
	w := h.worlds[clientID]
	h.mu.Unlock()
	if w == nil {
		return
	}
	<-w.ready
	if w.eng != nil {
		w.eng.handedOff.Store(&reason)
		_ = w.eng.Close()
	}
}

// SetReplicator makes every world the host opens from now on replicate
// its groups through rep (see Replicator). It is set before any world is
// opened, when the node joins a cluster.
func (h *Host) SetReplicator(rep Replicator) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opts.Replicator = rep
}
