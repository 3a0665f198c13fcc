package world

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Engine is a world held in memory and written through to its SQLite file.
// It implements [World], [Documents], [DocumentSearch], [Folders] and
// [Selection] itself; package world/embedded adds the other capabilities.
//
// Reads never touch the disk: the engine's state is an immutable snapshot
// of every document, swapped atomically after each commit, so a reader
// takes the current snapshot without locking and sees one consistent state
// however long it looks. Writes go one at a time through [Engine.Mutate]:
// each builds new versions of the documents it changes on top of the
// latest state, then waits while the committer writes it, with the other
// transactions that came meanwhile, in one SQLite transaction (see
// commit.go); only then are the new versions swapped in for readers.
type Engine struct {
	info     Info
	perms    map[string]Role
	clock    func() time.Time
	newID    func() string
	onCommit func([]Change)
	// observeCommit is Options.ObserveCommit.
	observeCommit func(time.Duration, int)
	journal       Journal
	limits        Limits
	// replicator, in a cluster, takes every group before it is written
	// (replicate.go). replSeq and replBase, used by the committer only,
	// are the sequence of the last record of the world's log this copy
	// holds and the base it was built from; fenced is set once an append
	// failed and the engine stopped serving the world.
	replicator Replicator
	replSeq    uint64
	replBase   string
	fenced     atomic.Bool

	store *store
	// writer is the write lock: a token taken by the one writer at a time.
	// It is a channel so that waiting for it can give up with a context.
	writer chan struct{}
	// latest, under the write lock, is the state writers build on: the
	// published snapshot plus the transactions waiting to be committed.
	latest  *snapshot
	commits committer
	// snap is the published state: durable, what readers see.
	snap   atomic.Pointer[snapshot]
	closed atomic.Bool
	// handedOff, set by Host.Handoff before the engine closes, is what
	// the calls that reach it afterwards are told.
	handedOff atomic.Pointer[string]

	closeOnce sync.Once
	closeErr  error

	selection selection
	// settings are the world's settings (see Setting); settingsMu orders
	// their writers.
	settings   atomic.Pointer[map[string]any]
	settingsMu sync.Mutex
	json       jsonCache
	embedded   embeddedJSON
	// sizes, under the write lock, remembers the sizes of large documents
	// for the document size limit (limits.go).
	sizes map[docKey]sizeMemo
	// onClose, set by the host, forgets the world once it is closed.
	onClose func()
	// idem knows the idempotency keys the world keeps (idempotency.go).
	idem idempotencyIndex
}

var _ World = (*Engine)(nil)

// snapshot is one committed state of the world. Neither it nor anything it
// holds is ever changed; a commit builds a new snapshot. Every document in
// it keeps the invariant checkEmbedded states, which the code relies on.
type snapshot struct {
	docs  map[*docType]*docTable // top-level documents by type and id
	users *userIndex
}

// Meta keys of the world settings.
const (
	metaClientID    = "clientId"
	metaTitle       = "title"
	metaSystem      = "system"
	metaPermissions = "permissions"
)

// newEngine returns an engine over an open store with the given state.
func newEngine(st *store, info Info, perms map[string]Role, docs map[*docType]map[string]Document, opts Options) *Engine {
	e := &Engine{
		info:          info,
		perms:         perms,
		clock:         opts.Clock,
		newID:         opts.NewID,
		onCommit:      opts.OnCommit,
		observeCommit: opts.ObserveCommit,
		journal:       opts.Journal,
		limits:        opts.Limits,
		replicator:    opts.Replicator,
		store:         st,
		writer:        make(chan struct{}, 1),
	}
	e.commits.delay = opts.CommitDelay
	if e.clock == nil {
		e.clock = time.Now
	}
	if e.newID == nil {
		e.newID = randomID
	}
	tables := make(map[*docType]*docTable, len(docs))
	for t, byID := range docs {
		tables[t] = newDocTable(byID)
	}
	e.latest = &snapshot{docs: tables, users: buildUserIndex(tables[typeUser])}
	e.snap.Store(e.latest)
	return e
}

// openEngine opens the world stored at path and loads every document.
func openEngine(ctx context.Context, path, clientID string, opts Options) (*Engine, error) {
	st, err := openStore(path, false)
	if err != nil {
		return nil, err
	}
	e, err := loadEngine(ctx, st, clientID, opts)
	if err != nil {
		st.close()
		return nil, err
	}
	return e, nil
}

// loadEngine reads the settings and documents of an open store.
func loadEngine(ctx context.Context, st *store, clientID string, opts Options) (*Engine, error) {
	meta, err := st.loadMeta(ctx)
	if err != nil {
		return nil, err
	}
	perms := map[string]Role{}
	if p := meta[metaPermissions]; p != "" {
		if err := json.Unmarshal([]byte(p), &perms); err != nil {
			return nil, fmt.Errorf("reading the permissions: %w", err)
		}
	}
	docs := map[*docType]map[string]Document{}
	err = st.loadDocuments(ctx, func(collection, id string, data []byte) error {
		t := docTypes[collection]
		if t == nil || !t.topLevel {
			return fmt.Errorf("unknown collection %q", collection)
		}
		var doc Document
		if err := json.Unmarshal(data, &doc); err != nil {
			return fmt.Errorf("reading %s.%s: %w", collection, id, err)
		}
		if err := checkEmbedded(t, doc); err != nil {
			return fmt.Errorf("reading %s.%s: %w", collection, id, err)
		}
		if docs[t] == nil {
			docs[t] = map[string]Document{}
		}
		docs[t][id] = doc
		return nil
	})
	if err != nil {
		return nil, err
	}
	settings, err := loadSettings(meta)
	if err != nil {
		return nil, err
	}
	info := Info{ClientID: clientID, Title: meta[metaTitle], System: meta[metaSystem]}
	e := newEngine(st, info, perms, docs, opts)
	e.settings.Store(&settings)
	e.replSeq, _ = strconv.ParseUint(meta[metaReplSeq], 10, 64)
	e.replBase = meta[metaReplBase]
	return e, nil
}

// checkEmbedded checks the shape every document in memory keeps: each
// embedded collection is an array of objects with unique, well-formed ids
// (a missing collection becomes an empty array). New documents get it from
// Tx.prepare; this guards what is loaded from disk.
func checkEmbedded(t *docType, doc Document) error {
	for _, f := range t.embedded {
		if doc[f.key] == nil {
			doc[f.key] = []any{}
			continue
		}
		docs, ok := doc[f.key].([]any)
		if !ok {
			return fmt.Errorf("%q is not an array", f.key)
		}
		seen := make(map[string]bool, len(docs))
		for _, d := range docs {
			child, _ := d.(map[string]any)
			id, _ := child["_id"].(string)
			if child == nil || !validID(id) || seen[id] {
				return fmt.Errorf("%q holds a document without a unique, well-formed _id", f.key)
			}
			seen[id] = true
			if err := checkEmbedded(f.typ, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// Info describes the world.
func (e *Engine) Info() Info { return e.info }

// ResolveUser finds a user by id, then by case-insensitive name.
func (e *Engine) ResolveUser(ctx context.Context, idOrName string) (*User, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	return e.snap.Load().users.resolve(idOrName)
}

// Users lists the world's users, sorted by name.
func (e *Engine) Users(ctx context.Context) ([]User, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	return append([]User(nil), e.snap.Load().users.sorted...), nil
}

// Can reports whether user holds a world permission (see [Seed]): one the
// world maps to a role the user's role reaches, or, unmapped, when the user
// is a GM. The nil user holds every permission.
func (e *Engine) Can(user *User, permission string) bool { return can(e.perms, user, permission) }

// View runs fn with a read-only view of the current committed state. The
// view stays consistent for as long as fn runs, even while writers commit;
// it holds no lock, so fn may take its time. fn's error is returned as is.
func (e *Engine) View(ctx context.Context, fn func(v *View) error) error {
	if err := e.ready(); err != nil {
		return err
	}
	return fn(e.view())
}

// view returns a view of the current committed state.
func (e *Engine) view() *View { return &View{snap: e.snap.Load()} }

// ready fails once the world is closed.
func (e *Engine) ready() error {
	if e.closed.Load() {
		if msg := e.handedOff.Load(); msg != nil {
			return Errorf(ErrUnavailable, "%s", *msg)
		}
		return Errorf(ErrUnavailable, "World %s is closed", e.info.ClientID)
	}
	if e.fenced.Load() {
		return errFenced(e.info.ClientID)
	}
	return nil
}

// Close waits for the current writer and the commits under way, then
// closes the world's store. Later calls fail with ErrUnavailable; closing
// again does nothing.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		// Under the write lock, so that no transaction is queued after
		// the committer has stopped.
		e.writer <- struct{}{}
		e.closed.Store(true)
		<-e.writer
		e.stopCommitter()
		err := e.store.close()
		if e.onClose != nil {
			e.onClose()
		}
		if err != nil {
			e.closeErr = Wrapf(ErrUnavailable, err, "Closing world %s failed", e.info.ClientID)
		}
	})
	return e.closeErr
}

// contextError turns a context's error into a world error.
func contextError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return Errorf(ErrTimeout, "The operation timed out")
	}
	return Errorf(ErrUnavailable, "The operation was canceled")
}

// withDocs returns a snapshot with the changed top-level documents of a
// finished transaction applied. Only the shards of the tables that changed
// are copied.
func (s *snapshot) withDocs(tx *Tx, changed []docKey) *snapshot {
	next := &snapshot{docs: maps.Clone(s.docs), users: s.users}
	editors := map[*docType]*tableEditor{}
	for _, k := range changed {
		ed := editors[k.typ]
		if ed == nil {
			ed = edit(s.docs[k.typ])
			editors[k.typ] = ed
			next.docs[k.typ] = ed.t
		}
		ed.set(k.id, tx.work[k].after)
	}
	if editors[typeUser] != nil {
		next.users = buildUserIndex(next.docs[typeUser])
	}
	return next
}

// The capabilities the engine offers by itself.
var (
	_ World          = (*Engine)(nil)
	_ Documents      = (*Engine)(nil)
	_ DocumentSearch = (*Engine)(nil)
	_ Folders        = (*Engine)(nil)
	_ Selection      = (*Engine)(nil)
)
