package world

// View is a read-only view of a world's documents at one moment. Views come
// from [Engine.View] (the committed state) and [Tx.View] (the state inside a
// transaction, its own changes included).
//
// Documents a View returns are shared with the world and MUST NOT be
// changed: they are the stored versions themselves, handed out without a
// copy because reads are the world's hot path. Use [Clone] for a copy to
// change, or [Tx.Get] inside a transaction.
//
// A View checks no permissions by itself; [View.Level], [View.Read] and
// [View.RequireOwner] apply the rules for a given user.
type View struct {
	snap *snapshot
	tx   *Tx // nil outside a transaction
}

// top returns the current version of a top-level document, or nil.
func (v *View) top(k docKey) Document {
	if v.tx != nil {
		if p, ok := v.tx.work[k]; ok {
			return p.after
		}
	}
	return v.snap.docs[k.typ].get(k.id)
}

// lookup returns the top-level document a ref lives in and the document it
// addresses.
func (v *View) lookup(r ref) (top, doc Document, err error) {
	top = v.top(r.top())
	if top == nil {
		return nil, nil, errNotFound(r.uuid)
	}
	doc = top
	for _, s := range r.segs[1:] {
		docs := docsOf(doc, s.field)
		i := indexOf(docs, s.id)
		if i < 0 {
			return nil, nil, errNotFound(r.uuid)
		}
		doc = docs[i].(map[string]any)
	}
	return top, doc, nil
}

// find parses a uuid and looks its document up.
func (v *View) find(uuid string) (r ref, top, doc Document, err error) {
	if r, err = parseUUID(uuid); err != nil {
		return r, nil, nil, err
	}
	top, doc, err = v.lookup(r)
	return r, top, doc, err
}

// errNotFound is the error for a uuid that names no document.
func errNotFound(uuid string) error { return Errorf(ErrNotFound, "Entity not found: %s", uuid) }

// Get returns the document a uuid addresses, top-level or embedded. A
// malformed uuid is ErrInvalid, an unknown document ErrNotFound. The
// document is shared: do not change it.
func (v *View) Get(uuid string) (Document, error) {
	_, _, doc, err := v.find(uuid)
	return doc, err
}

// Each calls fn with every top-level document of one type (`Actor`,
// `Folder`, ...) until fn returns false. The order is unspecified; a
// document's uuid is `<documentName>.<_id>`. The documents are shared: do
// not change them.
func (v *View) Each(documentName string, fn func(doc Document) bool) {
	if t := docTypes[documentName]; t != nil && t.topLevel {
		v.each(t, fn)
	}
}

// each is Each for a type already looked up.
func (v *View) each(t *docType, fn func(doc Document) bool) {
	all := v.snap.docs[t].each(func(id string, doc Document) bool {
		if v.tx != nil {
			if _, ok := v.tx.work[docKey{t, id}]; ok {
				return true // visited below, in its transaction version
			}
		}
		return fn(doc)
	})
	if !all || v.tx == nil {
		return
	}
	for _, k := range v.tx.order {
		if after := v.tx.work[k].after; k.typ == t && after != nil {
			if !fn(after) {
				return
			}
		}
	}
}

// ResolveUser finds a user by id, then by case-insensitive name, among the
// users as committed when the view was taken.
func (v *View) ResolveUser(idOrName string) (*User, error) { return v.snap.users.resolve(idOrName) }

// Level returns user's permission level on the document a uuid addresses
// (an embedded document has its top-level document's level).
func (v *View) Level(user *User, uuid string) (Level, error) {
	r, top, _, err := v.find(uuid)
	if err != nil {
		return LevelNone, err
	}
	return levelOf(user, r.segs[0].typ, top), nil
}

// Read returns what user may see of a document, as a private copy: the
// full source data plus a `uuid` key for OBSERVER and OWNER, the four
// LIMITED keys (`name`, `uuid`, `type`, `img`) for LIMITED, and an
// ErrPermission error for NONE. The level is [View.ReadLevel]'s, and a
// combat read by a non-GM leaves out the hidden combatants they may not
// see (see visibility.go).
func (v *View) Read(user *User, uuid string) (Document, error) {
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return nil, err
	}
	return v.readAs(user, r, top, doc)
}

// RequireOwner fails with the tabletop's permission error
// (`User '<name>' does not have permission to <operation> '<doc>'`) unless
// user is OWNER of the document a uuid addresses. operation is the verb
// phrase of reference §2.4, e.g. "update" or "give items to". An unknown
// document is ErrNotFound.
func (v *View) RequireOwner(user *User, uuid, operation string) error {
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return err
	}
	return v.requireOwner(user, r, top, doc, operation)
}

// ActiveScene returns the scene marked `active: true`, or ErrFailedPrecondition
// `No active scene found`. Should several be marked, the lowest id wins.
func (v *View) ActiveScene() (Document, error) {
	var active Document
	v.each(typeScene, func(doc Document) bool {
		if doc["active"] == true && (active == nil || str(doc["_id"]) < str(active["_id"])) {
			active = doc
		}
		return true
	})
	if active == nil {
		return nil, Errorf(ErrFailedPrecondition, "No active scene found")
	}
	return active, nil
}
