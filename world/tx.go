package world

import (
	"bytes"
	"context"
	"maps"
	"reflect"
	"slices"
	"time"
)

// Tx is one write transaction on a world, handed to the function given to
// [Engine.Mutate]. It is the base of every operation that changes documents,
// inside this package and in the packages built on it (the ruleset, combat):
// whatever the function does through the Tx becomes visible and durable all
// at once when the function returns nil, or not at all.
//
// Addressing: every method takes a uuid (`Actor.<id>`, `Actor.<id>.Item.<id>`,
// `Scene.<id>.Token.<id>`, ...), so top-level and embedded documents are
// handled alike.
//
// Copies: [Tx.Get] returns a private copy to change freely and [Tx.Put]
// stores a copy of what it is given, so a caller never shares memory with
// the world. [Tx.View] reads without copying (the documents it returns must
// not be changed).
//
// Bookkeeping the Tx does by itself:
//   - `_id` always matches the uuid; embedded documents without an `_id` get
//     a fresh one;
//   - `_stats.createdTime` and `_stats.modifiedTime` (milliseconds) are set
//     on creation and `modifiedTime` whenever a document's own fields change
//     (a change to an embedded document stamps only that document); `_stats`
//     itself cannot be set by callers;
//   - a document's embedded collections (`items`, `effects`, `tokens`,
//     `pages`, `combatants`) are always present, as arrays;
//   - at commit, every document that changed (embedded ones included) is
//     reported to [Options.OnCommit].
//
// A method that fails leaves the transaction as it was, so a caller may
// handle the error and go on. A Tx does not check permissions; callers do,
// with [View.RequireOwner] and friends on [Tx.View]. It is not safe for
// concurrent use and must not be used after the function it was given to
// has returned.
type Tx struct {
	e     *Engine
	base  *snapshot
	now   time.Time
	work  map[docKey]*pending
	order []docKey // keys in the order first touched, for a stable change order
	done  bool
}

// pending is a top-level document a transaction touched.
type pending struct {
	before Document // the committed version; nil when the document is new
	after  Document // the transaction's version; nil when deleted
}

// Mutate runs fn in a write transaction. Writers run fn one at a time:
// Mutate first waits for the world's write lock (giving up when ctx ends),
// then runs fn on the latest state of the world, which includes the
// transactions of other writers that are still being committed. If fn
// returns an error (or panics), nothing is changed and the error is
// returned unchanged, so fn should return world errors (see [Errorf]).
//
// If fn returns nil, its changes are committed: the lock passes to the
// next writer at once, and the transaction is written with every other
// one waiting at that moment in one SQLite transaction (group commit), then
// published to readers at once, then reported to Options.OnCommit. The
// contract:
//   - a nil error means the changes are durable (on disk, synced) and
//     visible to every reader: a read that starts after Mutate returns sees
//     them (read-your-writes);
//   - readers ([Engine.View], GetJSON and the rest) never see a state that
//     is not durable yet; only later writers' fn do;
//   - Options.OnCommit and Host.Watch receive each transaction's changes
//     once, in commit order, which is the order the fn ran in;
//   - if the SQLite write fails, Mutate fails with ErrUnavailable, and so
//     does every transaction written in the same group or built on top of
//     it since; the latest state goes back to the last durable one.
//
// A transaction that changes nothing writes nothing; if it read changes
// that are not durable yet, it waits for them (and fails with them). Once
// fn has returned nil, Mutate waits for the commit even if ctx is
// cancelled, so a nil error always means the changes are on disk.
func (e *Engine) Mutate(ctx context.Context, fn func(tx *Tx) error) error {
	return e.mutate(ctx, nil, fn)
}

// mutate is Mutate, also writing world settings (meta) in the same
// transaction.
func (e *Engine) mutate(ctx context.Context, meta map[string]string, fn func(tx *Tx) error) error {
	_, err := e.mutateReq(ctx, meta, fn)
	return err
}

// mutateReq is mutate, also returning the committed request (nil when
// there was nothing to commit), so that a writer can answer with what the
// commit serialised rather than serialise it again.
func (e *Engine) mutateReq(ctx context.Context, meta map[string]string, fn func(tx *Tx) error) (*commitReq, error) {
	req, err := e.run(ctx, meta, fn)
	if req == nil || err != nil {
		return nil, err
	}
	// The serialisation and the diff are done here, after the lock is
	// released: writers prepare their commits in parallel while the next
	// one runs its fn. The committer waits for it.
	req.prepare(e)
	<-req.done
	if req.err != nil {
		return nil, req.err
	}
	return req, nil
}

// committedJSON returns the full readers' JSON that the commit of req made
// for the top-level document doc (the version it stored), if it made it.
func (req *commitReq) committedJSON(doc Document) ([]byte, bool) {
	if req == nil {
		return nil, false
	}
	id := identity(doc)
	for _, c := range req.cached {
		if identity(c.doc) == id {
			return c.json, true
		}
	}
	return nil, false
}

// run runs fn under the write lock and queues its transaction for the
// committer; a nil request means there is nothing to wait for. The
// request must then be prepared.
func (e *Engine) run(ctx context.Context, meta map[string]string, fn func(tx *Tx) error) (req *commitReq, err error) {
	// Counted as a writer in the engine until its transaction is queued,
	// so that the committer can wait for it to join a group (see gather).
	e.commits.beginWrite()
	queued := false
	defer func() {
		if !queued {
			e.commits.endWrite()
		}
	}()
	select {
	case e.writer <- struct{}{}:
	case <-ctx.Done():
		return nil, contextError(ctx.Err())
	}
	defer func() { <-e.writer }()
	if err := e.ready(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, contextError(err)
	}
	tx := &Tx{e: e, base: e.latest, now: e.clock(), work: map[docKey]*pending{}}
	err = func() error {
		defer func() { tx.done = true }()
		return fn(tx)
	}()
	if err != nil {
		return nil, err
	}
	// A keyed write records its idempotency key with its first
	// transaction (idempotency.go).
	meta = e.idempotentMeta(ctx, meta)
	req = &commitReq{meta: meta, prepared: make(chan struct{}), done: make(chan struct{})}
	var changed []docKey
	for _, k := range tx.order {
		p := tx.work[k]
		if p.before == nil && p.after == nil || p.before != nil && p.after != nil && sameMap(p.before, p.after) {
			continue
		}
		changed = append(changed, k)
		req.docs = append(req.docs, changedDoc{key: k, before: p.before, after: p.after})
	}
	if err := tx.checkDocumentSizes(changed); err != nil {
		return nil, err
	}
	if len(changed) == 0 && len(meta) == 0 {
		if tx.base == e.snap.Load() {
			return nil, nil
		}
		// It read changes not durable yet: it stands or falls with them.
		req.snap = tx.base
	} else {
		req.snap = tx.base.withDocs(tx, changed)
		e.latest = req.snap
	}
	e.enqueue(req)
	queued = true
	return req, nil
}

// changedDoc is a top-level document a transaction replaced (after is nil
// when it deleted it), as the committer needs it.
type changedDoc struct {
	key           docKey
	before, after Document
}

// prepare makes what the commit writes and reports from the documents the
// transaction changed, leaving out those that are equal to their version
// before: the rows, the full readers' JSON for the cache (each document is
// serialised once, for both) and the changes. It runs in the writer's
// goroutine, outside the write lock.
func (req *commitReq) prepare(e *Engine) {
	defer close(req.prepared)
	for _, d := range req.docs {
		uuid := d.key.uuid()
		r := row{collection: d.key.typ.name, id: d.key.id}
		if d.after != nil {
			// The parts kept of the version before, if they are of it,
			// tell whether anything changed without comparing the trees.
			prev := e.embedded.partsOf(uuid)
			enc, err := encodeTop(&e.embedded, d.key.typ, uuid, d.after)
			req.fresh = append(req.fresh, enc.fresh...)
			if err != nil {
				req.prepErr = Wrapf(ErrInvalid, err, "Could not encode the changes")
				return
			}
			full := enc.full
			if d.before != nil && e.unchanged(uuid, d.before, d.after, full, prev) {
				// Nothing to write or report; the JSON still is that of
				// the version published, for the writer's answer and the
				// readers' cache (an update that set the values already
				// there would serialise the document again otherwise).
				req.cached = append(req.cached, cachedJSON{uuid: uuid, doc: d.after, json: full})
				continue
			}
			r = enc.row(r.collection, r.id)
			req.cached = append(req.cached, cachedJSON{uuid: uuid, doc: d.after, json: full})
		}
		req.rows = append(req.rows, r)
		req.changes = diffTree(req.changes, d.key.typ, uuid, d.before, d.after, true)
	}
}

// unchanged reports whether a document whose new version serialises as
// full is equal to its version before: by their JSON when a reader has had
// the one before serialised or its JSON was kept (prev), else by comparing
// them (cheaply where they share what the transaction did not touch).
func (e *Engine) unchanged(uuid string, before, after Document, full []byte, prev *docParts) bool {
	if raw, ok := e.json.cached(uuid, before); ok {
		return bytes.Equal(raw, full)
	}
	if same, ok := prev.sameData(before, full); ok {
		return same
	}
	return treeEqual(before, after)
}

// encodeDoc writes a document as compact JSON, leaving <, > and & as they are.
func encodeDoc(doc Document) ([]byte, error) { return encodeJSON(doc) }

// diffTree appends the changes between two versions of a document (nil for
// absent) and, recursively, of its embedded documents: the document's own
// change first, then its embedded documents' in field order. Creating or
// deleting a document creates or deletes its embedded documents too, and
// each of those is reported as well.
//
// known says the two versions are known to differ, which spares comparing
// them.
func diffTree(changes []Change, t *docType, uuid string, before, after Document, known bool) []Change {
	switch {
	case before == nil:
		changes = append(changes, Change{Op: ChangeCreate, UUID: uuid, DocumentName: t.name, After: after})
	case after == nil:
		changes = append(changes, Change{Op: ChangeDelete, UUID: uuid, DocumentName: t.name, Before: before})
	case !known && (sameMap(before, after) || treeEqual(before, after)):
		return changes
	default:
		changes = append(changes, Change{Op: ChangeUpdate, UUID: uuid, DocumentName: t.name, Before: before, After: after})
	}
	for _, f := range t.embedded {
		was, is := docsOf(before, f.key), docsOf(after, f.key)
		if sameSlice(was, is) {
			continue
		}
		old := byID(was)
		for _, d := range is {
			child := d.(map[string]any)
			id := child["_id"].(string)
			changes = diffTree(changes, f.typ, uuid+"."+f.typ.name+"."+id, old[id], child, false)
			delete(old, id)
		}
		for _, d := range was { // what is left in old was deleted; keep the array order
			child := d.(map[string]any)
			if id := child["_id"].(string); old[id] != nil {
				changes = diffTree(changes, f.typ, uuid+"."+f.typ.name+"."+id, child, nil, false)
			}
		}
	}
	return changes
}

// byID indexes embedded documents by id.
func byID(docs []any) map[string]Document {
	m := make(map[string]Document, len(docs))
	for _, d := range docs {
		doc := d.(map[string]any)
		m[doc["_id"].(string)] = doc
	}
	return m
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap(a, b Document) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// use panics when the Tx is used after its transaction ended: that is a
// programming error, and failing loudly beats a change silently lost.
func (tx *Tx) use() {
	if tx.done {
		panic("world: Tx used after its transaction ended")
	}
}

// View returns a read-only view of the world as this transaction sees it,
// its own changes so far included.
func (tx *Tx) View() *View {
	tx.use()
	return &View{snap: tx.base, tx: tx}
}

// Now returns the transaction's time, the same for every stamp it writes.
func (tx *Tx) Now() time.Time { return tx.now }

// NewID returns a fresh document id from the world's id source.
func (tx *Tx) NewID() string { return tx.e.newID() }

// nowMillis is the transaction's time as a JSON number of milliseconds.
func (tx *Tx) nowMillis() float64 { return float64(tx.now.UnixMilli()) }

// Get returns a private copy of the document a uuid addresses, as this
// transaction sees it. Change it and [Tx.Put] it back to write it.
func (tx *Tx) Get(uuid string) (Document, error) {
	tx.use()
	_, _, doc, err := tx.View().find(uuid)
	if err != nil {
		return nil, err
	}
	return deepCopyMap(doc), nil
}

// Put stores doc as the whole new version of the document a uuid addresses,
// creating it when it does not exist (an embedded document's parent must
// exist). Its embedded collections are replaced too: a missing one becomes
// empty, so start from [Tx.Get] rather than from scratch. A `uuid` key is
// dropped, `_id` is set from the uuid and `_stats` is managed as described
// on [Tx].
func (tx *Tx) Put(uuid string, doc Document) error {
	tx.use()
	r, err := parseUUID(uuid)
	if err != nil {
		return err
	}
	if doc == nil {
		return Errorf(ErrInvalid, "'data' must be an object")
	}
	next, err := normalizeDoc("data", doc, tx.e.limits)
	if err != nil {
		return err
	}
	delete(next, "uuid")
	next["_id"] = r.id()
	if err := tx.prepare(r.typ(), next); err != nil {
		return err
	}
	if _, _, before, err := tx.View().find(uuid); err == nil {
		resetDeathSaves(tx.e.info.System, r.typ(), before, next)
	}
	return tx.replace(r, next)
}

// Create adds a new document of the named type (`Actor`, or with parentUUID
// an embedded type such as `Item` on an Actor) and returns its uuid. A
// well-formed `_id` in data is kept when free (ErrConflict otherwise);
// without one the document gets a fresh id. Any `_stats` in data is
// replaced by fresh stamps. The caller is responsible for anything else the
// operation implies (ownership, folder checks).
func (tx *Tx) Create(documentName, parentUUID string, data Document) (string, error) {
	tx.use()
	t := docTypes[documentName]
	if t == nil {
		return "", Errorf(ErrInvalid, "Invalid entity type: %s", documentName)
	}
	doc, err := normalizeDoc("data", data, tx.e.limits)
	if err != nil {
		return "", err
	}
	delete(doc, "uuid")
	dropStats(t, doc)
	v := tx.View()
	var (
		parent ref
		field  embeddedField
		taken  func(id string) bool
	)
	if parentUUID == "" {
		if !t.topLevel {
			return "", Errorf(ErrInvalid, "%s documents can only be created inside a parent document", t.name)
		}
		taken = func(id string) bool { return v.top(docKey{t, id}) != nil }
	} else {
		pr, _, pdoc, err := v.find(parentUUID)
		if err != nil {
			return "", err
		}
		f, ok := pr.typ().field(t.name)
		if !ok {
			return "", Errorf(ErrInvalid, "%s documents cannot hold %s documents", pr.typ().name, t.name)
		}
		parent, field = pr, f
		siblings := docsOf(pdoc, f.key)
		taken = func(id string) bool { return indexOf(siblings, id) >= 0 }
	}
	id, err := tx.pickID(doc["_id"], taken)
	if err != nil {
		return "", err
	}
	r := ref{uuid: t.name + "." + id, segs: []segment{{typ: t, id: id}}}
	if parentUUID != "" {
		r = parent.child(field, id)
	}
	doc["_id"] = id
	if err := tx.prepare(t, doc); err != nil {
		return "", err
	}
	if err := tx.replace(r, doc); err != nil {
		return "", err
	}
	return r.uuid, nil
}

// pickID returns the id a new document gets: the requested one when it is
// well formed and free, else a fresh one.
func (tx *Tx) pickID(requested any, taken func(string) bool) (string, error) {
	if requested != nil && requested != "" {
		id, ok := requested.(string)
		if !ok || !validID(id) {
			return "", Errorf(ErrInvalid, "'_id' must be %d letters and digits", idLength)
		}
		if taken(id) {
			return "", Errorf(ErrConflict, "Entity with ID '%s' already exists", id)
		}
		return id, nil
	}
	for {
		if id := tx.e.newID(); !taken(id) {
			return id, nil
		}
	}
}

// dropStats removes `_stats` from a new document and its embedded ones, so
// they get fresh stamps.
func dropStats(t *docType, doc Document) {
	delete(doc, "_stats")
	for _, f := range t.embedded {
		for _, d := range docsOf(doc, f.key) {
			if child, ok := d.(map[string]any); ok {
				dropStats(f.typ, child)
			}
		}
	}
}

// Update applies an update diff to the document a uuid addresses, with the
// tabletop's rules (see [Engine.Update]: dotted paths, merging of objects,
// `-=key` deletions, `==key` replacements; embedded collections, `_id` and
// `_stats` cannot be changed this way) and returns a private copy of the
// result. It checks no permissions.
func (tx *Tx) Update(uuid string, diff Document) (Document, error) {
	next, err := tx.update(uuid, diff)
	if err != nil {
		return nil, err
	}
	return deepCopyMap(next), nil
}

// update is Update returning the stored new version, which must not be
// changed: callers that do not need a private copy spare its cost.
func (tx *Tx) update(uuid string, diff Document) (Document, error) {
	tx.use()
	r, _, cur, err := tx.View().find(uuid)
	if err != nil {
		return nil, err
	}
	next, err := applyDiff(r.typ(), r.uuid, cur, diff, tx.e.limits, rulesFor(tx.e.info.System))
	if err != nil {
		return nil, err
	}
	resetDeathSaves(tx.e.info.System, r.typ(), cur, next)
	if err := tx.replace(r, next); err != nil {
		return nil, err
	}
	return next, nil
}

// Delete removes the document a uuid addresses, with its embedded
// documents. An unknown document is ErrNotFound.
func (tx *Tx) Delete(uuid string) error {
	tx.use()
	r, err := parseUUID(uuid)
	if err != nil {
		return err
	}
	return tx.replace(r, nil)
}

// entry returns the pending version of a top-level document, starting one
// from the committed version when the transaction first touches it.
func (tx *Tx) entry(k docKey) *pending {
	p, ok := tx.work[k]
	if !ok {
		doc := tx.base.docs[k.typ].get(k.id)
		p = &pending{before: doc, after: doc}
		tx.work[k] = p
		tx.order = append(tx.order, k)
	}
	return p
}

// replace stores next (nil: deletes) at a ref. next must be fresh and
// prepared; it is stamped here and from then on never changed. Nothing
// already stored is changed either: the path from the top-level document
// down to next is copied, everything else is shared.
func (tx *Tx) replace(r ref, next Document) error {
	p := tx.entry(r.top())
	if !r.embedded() {
		if next == nil && p.after == nil {
			return errNotFound(r.uuid)
		}
		if next != nil {
			stampTree(r.typ(), p.after, next, tx.nowMillis())
		}
		p.after = next
		return nil
	}
	if p.after == nil {
		return errNotFound(r.uuid)
	}
	top, err := tx.replaceIn(p.after, r, 1, next)
	if err != nil {
		return err
	}
	p.after = top
	return nil
}

// replaceIn returns a copy of doc with the document at r.segs[i:] replaced.
func (tx *Tx) replaceIn(doc Document, r ref, i int, next Document) (Document, error) {
	s := r.segs[i]
	docs := docsOf(doc, s.field)
	at := indexOf(docs, s.id)
	var out []any
	switch {
	case i < len(r.segs)-1:
		if at < 0 {
			return nil, errNotFound(r.uuid)
		}
		child, err := tx.replaceIn(docs[at].(map[string]any), r, i+1, next)
		if err != nil {
			return nil, err
		}
		out = slices.Clone(docs)
		out[at] = child
	case next == nil:
		if at < 0 {
			return nil, errNotFound(r.uuid)
		}
		out = slices.Delete(slices.Clone(docs), at, at+1)
	case at < 0:
		stampTree(s.typ, nil, next, tx.nowMillis())
		out = append(slices.Clip(docs), next)
	default:
		stampTree(s.typ, docs[at].(map[string]any), next, tx.nowMillis())
		out = slices.Clone(docs)
		out[at] = next
	}
	copied := maps.Clone(doc)
	copied[s.field] = out
	return copied, nil
}

// stampTree sets `_stats` on a fresh document and its fresh embedded
// documents, given their previous versions (nil when new). A new document
// keeps stamps it already carries (a seed's) and gets the missing ones; an
// existing one keeps its previous `_stats`, with `modifiedTime` moved to now
// when its own fields (not its embedded documents) changed.
func stampTree(t *docType, prev, next Document, now float64) {
	stats := Document{}
	if prev == nil {
		if s, ok := next["_stats"].(map[string]any); ok {
			stats = s
		}
		if _, ok := number(stats["createdTime"]); !ok {
			stats["createdTime"] = now
		}
		if _, ok := number(stats["modifiedTime"]); !ok {
			stats["modifiedTime"] = now
		}
	} else {
		if s, ok := prev["_stats"].(map[string]any); ok {
			stats = maps.Clone(s)
		}
		if ownFieldsDiffer(t, prev, next) {
			stats["modifiedTime"] = now
		}
	}
	next["_stats"] = stats
	for _, f := range t.embedded {
		was, is := docsOf(prev, f.key), docsOf(next, f.key)
		if sameSlice(was, is) {
			continue
		}
		old := byID(was)
		for _, d := range is {
			child := d.(map[string]any)
			before := old[child["_id"].(string)]
			if before != nil && sameMap(before, child) {
				continue // shared with the previous version: unchanged and not ours to stamp
			}
			stampTree(f.typ, before, child, now)
		}
	}
}

// ownFieldsDiffer compares two versions of a document, leaving out
// `_stats` and the embedded collections.
func ownFieldsDiffer(t *docType, a, b Document) bool {
	for k, v := range b {
		if k == "_stats" || t.isEmbeddedKey(k) {
			continue
		}
		if w, ok := a[k]; !ok || !treeEqual(v, w) {
			return true
		}
	}
	for k := range a {
		if k == "_stats" || t.isEmbeddedKey(k) {
			continue
		}
		if _, ok := b[k]; !ok {
			return true
		}
	}
	return false
}

// prepare checks a fresh document of type t and its embedded documents,
// gives every embedded document without an `_id` a fresh one and makes sure
// every embedded collection is an array.
func (tx *Tx) prepare(t *docType, doc Document) error {
	if err := validateOwn(t, doc); err != nil {
		return err
	}
	if err := rulesFor(tx.e.info.System).clean(t, str(doc["type"]), doc); err != nil {
		return err
	}
	for _, f := range t.embedded {
		raw := doc[f.key]
		if raw == nil {
			doc[f.key] = []any{}
			continue
		}
		docs, ok := raw.([]any)
		if !ok {
			return Errorf(ErrInvalid, "'%s' must be an array of documents", f.key)
		}
		ids := make(map[string]bool, len(docs))
		for _, d := range docs {
			child, ok := d.(map[string]any)
			if !ok {
				return Errorf(ErrInvalid, "'%s' must be an array of documents", f.key)
			}
			switch id := child["_id"].(type) {
			case nil:
			case string:
				if id == "" {
					break
				}
				if !validID(id) {
					return Errorf(ErrInvalid, "Invalid _id in '%s': %s", f.key, id)
				}
				if ids[id] {
					return Errorf(ErrInvalid, "Duplicate _id in '%s': %s", f.key, id)
				}
				ids[id] = true
			default:
				return Errorf(ErrInvalid, "Invalid _id in '%s': %v", f.key, id)
			}
		}
		for _, d := range docs {
			child := d.(map[string]any)
			if id, _ := child["_id"].(string); id == "" {
				for id = tx.e.newID(); ids[id]; id = tx.e.newID() {
				}
				ids[id] = true
				child["_id"] = id
			}
			if err := tx.prepare(f.typ, child); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateOwn checks a document's own fields: a `name` that is given (or
// that the type requires) must be a non-empty string, a user's role must be
// a role, a folder's type a document type that folders hold.
func validateOwn(t *docType, doc Document) error {
	if name, ok := doc["name"]; ok || t.nameRequired {
		if s, _ := name.(string); s == "" {
			return Errorf(ErrInvalid, "'name' must be a non-empty string")
		}
	}
	switch t {
	case typeUser:
		if r, ok := number(doc["role"]); !ok || r != float64(int(r)) || r < float64(RoleNone) || r > float64(RoleGamemaster) {
			return Errorf(ErrInvalid, "'role' must be a role number from %d to %d", RoleNone, RoleGamemaster)
		}
	case typeFolder:
		if foldered(str(doc["type"])) == nil {
			return Errorf(ErrInvalid, "'type' of a folder must be one of %s", folderedNames())
		}
	}
	return nil
}
