package world

import (
	"context"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"
)

// jsonCache keeps the JSON of documents as full readers see them (source
// data plus `uuid`), and as LIMITED readers see them (the four keys of
// limitedData), one entry per uuid: what a reader sees of a document
// depends only on the document and the reader's access class, so every
// reader of a class shares the same bytes until the document changes. Stored documents are never changed
// (a commit builds new ones), so an entry is valid exactly while it was made
// from the document that is stored now; the entry remembers that document's
// identity and holds it, so the identity cannot be reused by another map.
type jsonCache struct {
	entries sync.Map // uuid → *jsonEntry
}

type jsonEntry struct {
	src  unsafe.Pointer // the stored document the JSON was made from
	json []byte         // the full JSON; nil until a full reader asks
	// limited is the JSON a LIMITED reader sees, made at the first such
	// read of this version of the document.
	limited atomic.Pointer[[]byte]
}

// identity returns a document's identity: the address of its map.
func identity(doc Document) unsafe.Pointer {
	return reflect.ValueOf(doc).UnsafePointer()
}

// full returns the JSON of a stored document with its uuid, from the cache
// when it is current. The bytes are shared and must not be changed.
func (c *jsonCache) full(uuid string, doc Document) ([]byte, error) {
	id := identity(doc)
	var old *jsonEntry
	if v, ok := c.entries.Load(uuid); ok {
		if e := v.(*jsonEntry); e.src == id {
			if e.json != nil {
				return e.json, nil
			}
			old = e
		}
	}
	// A shallow copy is enough to add the uuid: values are only read.
	withUUID := make(map[string]any, len(doc)+1)
	for k, v := range doc {
		withUUID[k] = v
	}
	withUUID["uuid"] = uuid
	raw, err := EncodeJSON(withUUID)
	if err != nil {
		return nil, err
	}
	e := &jsonEntry{src: id, json: raw}
	if old != nil {
		// Keep the LIMITED JSON of the same version.
		e.limited.Store(old.limited.Load())
	}
	c.entries.Store(uuid, e)
	return raw, nil
}

// limited returns the JSON a LIMITED reader sees of a stored document of
// type t, from the cache when it is current. The bytes are shared and must
// not be changed.
func (c *jsonCache) limited(t *docType, uuid string, doc Document) ([]byte, error) {
	id := identity(doc)
	var e *jsonEntry
	if v, ok := c.entries.Load(uuid); ok {
		if e = v.(*jsonEntry); e.src != id {
			e = nil
		} else if raw := e.limited.Load(); raw != nil {
			return *raw, nil
		}
	}
	raw, err := EncodeJSON(limitedData(t, uuid, doc))
	if err != nil {
		return nil, err
	}
	if e == nil {
		// No entry for this version: start one. A full reader that
		// stored one meanwhile is replaced; the next one stores it again.
		e = &jsonEntry{src: id}
		c.entries.Store(uuid, e)
	}
	e.limited.Store(&raw)
	return raw, nil
}

// cached returns the JSON of a stored document with its uuid when the
// cache holds it.
func (c *jsonCache) cached(uuid string, doc Document) ([]byte, bool) {
	if v, ok := c.entries.Load(uuid); ok {
		if e := v.(*jsonEntry); e.src == identity(doc) && e.json != nil {
			return e.json, true
		}
	}
	return nil, false
}

// renew stores the JSON of a document just committed, made by the commit
// (see encodeFull), so that its next reader need not serialise it; only
// when readers have had the document serialised before, so that documents
// nobody reads (a chat message piling up) take no memory here.
func (c *jsonCache) renew(uuid string, doc Document, raw []byte) {
	if _, ok := c.entries.Load(uuid); ok {
		c.entries.Store(uuid, &jsonEntry{src: identity(doc), json: raw})
	}
}

// forget drops the entries of deleted documents.
func (c *jsonCache) forget(changes []Change) {
	for _, ch := range changes {
		if ch.Op == ChangeDelete {
			c.entries.Delete(ch.UUID)
		}
	}
}

// EncodeJSON serialises world data the way the world does for GetJSON:
// without escaping HTML characters (the output is data, not markup) and
// without a trailing newline.
func EncodeJSON(v any) ([]byte, error) { return encodeJSON(v) }

// GetJSON is [Engine.Get] serialised as JSON, for callers that pass documents
// on as JSON text. Full documents come from a cache that a commit renews, so
// a read of an unchanged document costs a lookup, not a serialisation. The
// returned bytes are shared and must not be changed.
func (e *Engine) GetJSON(ctx context.Context, user *User, uuid string) ([]byte, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	if uuid == "" {
		return nil, Errorf(ErrInvalid, "'uuid' is required")
	}
	v := e.view()
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return nil, err
	}
	if !user.IsGM() && needsView(r.typ()) {
		// What a non-GM sees of these depends on other documents: no
		// shared bytes to hand out.
		out, err := v.readAs(user, r, top, doc)
		if err != nil {
			return nil, err
		}
		return EncodeJSON(out)
	}
	switch levelOf(user, r.segs[0].typ, top) {
	case LevelNone:
		return nil, errNoView(user)
	case LevelLimited:
		raw, err := e.json.limited(r.typ(), r.uuid, doc)
		if err != nil {
			return nil, Wrapf(ErrUnavailable, err, "Could not serialise %s", r.uuid)
		}
		return raw, nil
	}
	raw, err := e.json.full(r.uuid, doc)
	if err != nil {
		return nil, Wrapf(ErrUnavailable, err, "Could not serialise %s", r.uuid)
	}
	return raw, nil
}
