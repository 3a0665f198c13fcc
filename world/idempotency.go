package world

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"
)

// Idempotent writes. A caller that sends a write with an idempotency key
// gets, when it sends the same write again with the same key, the answer
// of the first one, and the world applies the write once. The relay's
// services decide what a key and an answer are; the engine keeps them, in
// the world's own database, so that they live and die with the writes they
// describe:
//
//   - the first transaction a keyed write commits also records the key
//     (its caller's scope, the request's hash, "applied"), in the same
//     SQLite transaction and, in a cluster, in the same record of the
//     world's log, so that no node can hold the write without its key;
//   - once the services have the write's answer, they record it under the
//     same key (RecordIdempotent), in a transaction of its own.
//
// Keys are world settings (the meta table) under a prefix that loadMeta
// leaves out, so that opening a world or building a replication base never
// reads them. An empty value under the prefix deletes the key: that is how
// expired keys, and keys beyond the most a world keeps, leave, in the
// transaction of a newer key.

// metaIdempotencyPrefix starts the meta keys of idempotency records;
// metaIdempotencyEnd is the first key after every such key.
const (
	metaIdempotencyPrefix = "idempotency/"
	metaIdempotencyEnd    = "idempotency0"
)

// Idempotency states: a write applied whose answer is not known (yet, or
// ever: its node stopped first), a write applied whose answer was too large
// to keep, and a write whose answer is kept.
const (
	IdempotencyApplied  = "applied"
	IdempotencyUnkept   = "unkept"
	IdempotencyAnswered = "answered"
)

// IdempotencyRecord is what a world keeps under one idempotency key.
type IdempotencyRecord struct {
	// At is when the first request with the key arrived.
	At time.Time `json:"at"`
	// Hash identifies the request (method and message).
	Hash string `json:"hash"`
	// State is one of IdempotencyApplied, IdempotencyUnkept and
	// IdempotencyAnswered.
	State string `json:"state"`
	// RequestID is the request id of the first request.
	RequestID string `json:"requestId,omitempty"`
	// Answer is the first answer, in the services' own form, when State
	// is IdempotencyAnswered.
	Answer []byte `json:"answer,omitempty"`
}

// IdempotencyLimits bound what a world keeps: keys older than TTL are
// forgotten, and at most Max keys are kept, the oldest leaving first.
type IdempotencyLimits struct {
	TTL time.Duration
	Max int
}

// IdempotencyMark asks the first transaction of a write to record its
// idempotency key (see WithIdempotency).
type IdempotencyMark struct {
	// Scope and Key name the record: the caller's scope (its account)
	// and the key it sent.
	Scope, Key string
	// Record is what the transaction records (State IdempotencyApplied).
	Record IdempotencyRecord
	Limits IdempotencyLimits

	mu      sync.Mutex
	claimed bool
}

// Claimed reports whether a transaction recorded the mark.
func (m *IdempotencyMark) Claimed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claimed
}

// claim reports whether the caller is the first to record the mark.
func (m *IdempotencyMark) claim() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.claimed {
		return false
	}
	m.claimed = true
	return true
}

// idempotencyMarkKey is the context key of an [IdempotencyMark].
type idempotencyMarkKey struct{}

// WithIdempotency returns a context whose first committed transaction, in
// an embedded world, records mark with its changes.
func WithIdempotency(ctx context.Context, mark *IdempotencyMark) context.Context {
	return context.WithValue(ctx, idempotencyMarkKey{}, mark)
}

// IdempotencyLedger is a world that keeps idempotency records itself, with
// its writes (the embedded engine). The services keep the records of other
// worlds in memory.
type IdempotencyLedger interface {
	// LookupIdempotent returns the record kept under scope and key, if
	// one younger than limits.TTL is kept.
	LookupIdempotent(ctx context.Context, scope, key string, now time.Time, limits IdempotencyLimits) (IdempotencyRecord, bool, error)
	// RecordIdempotent keeps rec under scope and key, in a transaction of
	// its own.
	RecordIdempotent(ctx context.Context, scope, key string, rec IdempotencyRecord, limits IdempotencyLimits) error
}

var _ IdempotencyLedger = (*Engine)(nil)

// idempotencyIndex is what an engine knows of the keys its database keeps:
// their names and ages, so that a request whose key is new asks SQLite
// nothing, and so that the keys that must leave are known without a scan.
// It is loaded on first use (a world that took over from another node
// finds the keys the log brought), and it may hold a key whose transaction
// failed: the database is the truth, the index only a guide.
type idempotencyIndex struct {
	mu     sync.Mutex
	loaded bool
	at     map[string]time.Time
	// order lists the keys oldest first; a key that left, or was recorded
	// again later, may still be listed (its time then differs).
	order []indexedKey
}

type indexedKey struct {
	key string
	at  time.Time
}

func idempotencyMetaKey(scope, key string) string {
	return metaIdempotencyPrefix + scope + "/" + key
}

// load fills the index from the database, once.
func (x *idempotencyIndex) load(ctx context.Context, st *store) error {
	if x.loaded {
		return nil
	}
	rows, err := st.db.QueryContext(ctx, "SELECT key, value FROM meta WHERE key >= ? AND key < ?", metaIdempotencyPrefix, metaIdempotencyEnd)
	if err != nil {
		return err
	}
	defer rows.Close()
	at := map[string]time.Time{}
	var order []indexedKey
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		var rec IdempotencyRecord
		if json.Unmarshal([]byte(v), &rec) != nil {
			continue
		}
		at[k] = rec.At
		order = append(order, indexedKey{k, rec.At})
	}
	if err := rows.Err(); err != nil {
		return err
	}
	sortIndexed(order)
	x.at, x.order, x.loaded = at, order, true
	return nil
}

// sortIndexed sorts keys oldest first (insertion sort: the database lists
// them by name, and there are at most a few thousand).
func sortIndexed(keys []indexedKey) {
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j].at.Before(keys[j-1].at); j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
}

// add records metaKey in the index and adds to meta the deletions of the
// keys that must leave to make room for it: expired ones and the oldest
// beyond limits.Max. x.mu is held.
func (x *idempotencyIndex) add(metaKey string, at time.Time, limits IdempotencyLimits, meta map[string]string) {
	if t, known := x.at[metaKey]; !known || !t.Equal(at) {
		// A new key, or an expired one used again.
		x.at[metaKey] = at
		x.order = append(x.order, indexedKey{metaKey, at})
	}
	for len(x.order) > 0 {
		old := x.order[0]
		if t, ok := x.at[old.key]; !ok || !t.Equal(old.at) {
			x.order = x.order[1:] // left before, or listed again later
			continue
		}
		expired := limits.TTL > 0 && at.Sub(old.at) > limits.TTL
		if !expired && (limits.Max <= 0 || len(x.at) <= limits.Max) || old.key == metaKey {
			break
		}
		delete(x.at, old.key)
		x.order = x.order[1:]
		if _, set := meta[old.key]; !set {
			meta[old.key] = ""
		}
	}
	// The slice's array is reused from its start once it is half empty.
	if cap(x.order) > 64 && len(x.order) < cap(x.order)/2 {
		x.order = append([]indexedKey(nil), x.order...)
	}
}

// idempotentMeta returns meta with the record of the context's idempotency
// mark, when there is one that no transaction recorded yet. It runs under
// the write lock, for a transaction that will be committed.
func (e *Engine) idempotentMeta(ctx context.Context, meta map[string]string) map[string]string {
	mark, _ := ctx.Value(idempotencyMarkKey{}).(*IdempotencyMark)
	if mark == nil || !mark.claim() {
		return meta
	}
	value, err := json.Marshal(mark.Record)
	if err != nil {
		return meta
	}
	out := make(map[string]string, len(meta)+2)
	for k, v := range meta {
		out[k] = v
	}
	x := &e.idem
	x.mu.Lock()
	defer x.mu.Unlock()
	if err := x.load(ctx, e.store); err != nil {
		// Without the index, the record is still kept; only older keys
		// wait for a later write to leave.
		out[idempotencyMetaKey(mark.Scope, mark.Key)] = string(value)
		return out
	}
	k := idempotencyMetaKey(mark.Scope, mark.Key)
	out[k] = string(value)
	x.add(k, mark.Record.At, mark.Limits, out)
	return out
}

// LookupIdempotent implements [IdempotencyLedger].
func (e *Engine) LookupIdempotent(ctx context.Context, scope, key string, now time.Time, limits IdempotencyLimits) (IdempotencyRecord, bool, error) {
	k := idempotencyMetaKey(scope, key)
	x := &e.idem
	x.mu.Lock()
	if err := x.load(ctx, e.store); err != nil {
		x.mu.Unlock()
		return IdempotencyRecord{}, false, Wrapf(ErrUnavailable, err, "Could not read the idempotency keys of world %s", e.info.ClientID)
	}
	_, known := x.at[k]
	x.mu.Unlock()
	if !known {
		return IdempotencyRecord{}, false, nil
	}
	var v string
	err := e.store.db.QueryRowContext(ctx, "SELECT value FROM meta WHERE key = ?", k).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return IdempotencyRecord{}, false, nil
	}
	if err != nil {
		return IdempotencyRecord{}, false, Wrapf(ErrUnavailable, err, "Could not read the idempotency keys of world %s", e.info.ClientID)
	}
	var rec IdempotencyRecord
	if err := json.Unmarshal([]byte(v), &rec); err != nil {
		return IdempotencyRecord{}, false, nil
	}
	if limits.TTL > 0 && now.Sub(rec.At) > limits.TTL {
		return IdempotencyRecord{}, false, nil
	}
	return rec, true, nil
}

// RecordIdempotent implements [IdempotencyLedger].
func (e *Engine) RecordIdempotent(ctx context.Context, scope, key string, rec IdempotencyRecord, limits IdempotencyLimits) error {
	value, err := json.Marshal(rec)
	if err != nil {
		return Wrapf(ErrInvalid, err, "Could not record an idempotency key")
	}
	k := idempotencyMetaKey(scope, key)
	meta := map[string]string{k: string(value)}
	x := &e.idem
	x.mu.Lock()
	if x.load(ctx, e.store) == nil {
		x.add(k, rec.At, limits, meta)
	}
	x.mu.Unlock()
	return e.mutate(ctx, meta, func(*Tx) error { return nil })
}

// isIdempotencyDeletion reports whether a meta entry deletes an
// idempotency record rather than sets a setting.
func isIdempotencyDeletion(key, value string) bool {
	return value == "" && strings.HasPrefix(key, metaIdempotencyPrefix)
}
