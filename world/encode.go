package world

import (
	"bytes"
	"slices"
	"strings"
	"sync"
	"unsafe"
)

// encodeFull serialises a top-level document of type t once for both of
// its uses: full is what GetJSON gives a full reader (the document with
// its `uuid`, see jsonCache.full) and data is the stored row (the document
// alone). Both are byte for byte encoding/json's output, keys sorted; full
// is data with the `uuid` member inserted where it sorts.
//
// Embedded documents (an actor's items, ...) are taken from the engine's
// registry of their JSON when they are there (see embeddedJSON): most of a
// document's embedded documents are unchanged from one version to the
// next, and shared between them. fresh lists the embedded documents that
// were serialised here, for the registry once they are committed.
func encodeFull(reg *embeddedJSON, t *docType, uuid string, doc Document) (full, data []byte, fresh []embeddedDoc, err error) {
	enc, err := encodeTop(reg, t, uuid, doc)
	if err != nil {
		return nil, nil, nil, err
	}
	return enc.full, enc.appendData(nil), enc.fresh, nil
}

// encodedDoc is a top-level document serialised by encodeTop: full is its
// full readers' JSON, and its stored row is full without the bytes
// full[cutFrom:cutTo] (its `uuid` member and the comma that separates it),
// made only when a row is written (appendData); or data, when set.
type encodedDoc struct {
	full, data     []byte
	cutFrom, cutTo int
	fresh          []embeddedDoc
}

// appendData appends the document's stored JSON to dst.
func (enc *encodedDoc) appendData(dst []byte) []byte {
	if enc.data != nil {
		return append(dst, enc.data...)
	}
	dst = append(dst, enc.full[:enc.cutFrom]...)
	return append(dst, enc.full[enc.cutTo:]...)
}

// row returns the document's row, as the store writes it.
func (enc *encodedDoc) row(collection, id string) row {
	if enc.data != nil {
		return row{collection: collection, id: id, data: enc.data}
	}
	return row{collection: collection, id: id, data: enc.full, cutFrom: enc.cutFrom, cutTo: enc.cutTo}
}

// encodeTop serialises a top-level document as encodeFull does, into one
// buffer: the full readers' JSON, from which the stored row is cut when it
// is written, once per group commit rather than once per version.
func encodeTop(reg *embeddedJSON, t *docType, uuid string, doc Document) (encodedDoc, error) {
	if _, ok := doc["uuid"]; ok || doc == nil {
		// Never so in practice (writes drop it); keep it simple then.
		data, err := encodeDoc(doc)
		if err != nil {
			return encodedDoc{}, err
		}
		withUUID := make(map[string]any, len(doc))
		for k, v := range doc {
			withUUID[k] = v
		}
		withUUID["uuid"] = uuid
		full, err := EncodeJSON(withUUID)
		if err != nil {
			return encodedDoc{}, err
		}
		return encodedDoc{full: full, data: data}, nil
	}
	w := jsonWriters.Get().(*jsonWriter)
	defer w.release()
	member := appendJSONString([]byte(`"uuid":`), uuid)
	d := docWriter{w: w, reg: reg, prev: reg.partsOf(uuid), uuidMember: member}
	pooled := w.buf
	if d.prev != nil {
		// The size of the version before is known: serialise into a
		// buffer of about that size, which becomes full, instead of into
		// the pooled one and copying it out.
		w.buf = make([]byte, 0, len(d.prev.data)+512)
	}
	if _, err := d.document(t, doc, true); err != nil {
		w.buf = pooled
		return encodedDoc{}, err
	}
	var full []byte
	if d.prev != nil {
		full, w.buf = w.buf, pooled
	} else {
		full = slices.Clone(w.buf)
	}
	reg.keepParts(uuid, doc, full, d.parts)
	return encodedDoc{full: full, cutFrom: d.cutFrom, cutTo: d.cutTo, fresh: d.fresh}, nil
}

// docWriter writes documents, taking their embedded documents from a
// registry when it can.
type docWriter struct {
	w     *jsonWriter
	reg   *embeddedJSON
	fresh []embeddedDoc
	// prev holds the JSON of the objects inside the document's previous
	// version (nil when there is none to hand); parts records where this
	// version's objects are in w.buf, for the next version.
	prev  *docParts
	parts []partSpan
	// nested counts the embedded documents being written around the
	// current field: their objects are not kept (the embedded documents
	// are, whole).
	nested int
	// uuidMember, when set, is the `"uuid":"..."` member written into the
	// top-level document where it sorts; cutFrom and cutTo are where it
	// is, with its separating comma.
	uuidMember     []byte
	cutFrom, cutTo int
}

// document writes a document of type t. For the top level it returns
// where a `uuid` member would go: before the first key that sorts after
// it, else before the closing brace.
func (d *docWriter) document(t *docType, doc map[string]any, top bool) (uuidAt int, err error) {
	w := d.w
	base := len(w.keys)
	for k := range doc {
		w.keys = append(w.keys, k)
	}
	slices.Sort(w.keys[base:])
	w.buf = append(w.buf, '{')
	uuidAt = -1
	for i := range len(w.keys) - base {
		k := w.keys[base+i]
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		if top && uuidAt < 0 && k > "uuid" {
			uuidAt = len(w.buf)
			if d.uuidMember != nil {
				// Before the first key that sorts after it, with the
				// comma that separates them.
				d.cutFrom = len(w.buf)
				w.buf = append(w.buf, d.uuidMember...)
				w.buf = append(w.buf, ',')
				d.cutTo = len(w.buf)
			}
		}
		w.buf = appendJSONString(w.buf, k)
		w.buf = append(w.buf, ':')
		if err := d.member(t, k, doc[k]); err != nil {
			return 0, err
		}
	}
	if uuidAt < 0 {
		uuidAt = len(w.buf)
		if top && d.uuidMember != nil {
			// Last, after the comma that separates it from the key
			// before, if any.
			d.cutFrom = len(w.buf)
			if len(w.keys) > base {
				w.buf = append(w.buf, ',')
			}
			w.buf = append(w.buf, d.uuidMember...)
			d.cutTo = len(w.buf)
		}
	}
	w.buf = append(w.buf, '}')
	clear(w.keys[base:])
	w.keys = w.keys[:base]
	return uuidAt, nil
}

// member writes the value of a document's field: an embedded collection
// document by document, anything else as it is.
func (d *docWriter) member(t *docType, key string, v any) error {
	var field *embeddedField
	for i := range t.embedded {
		if t.embedded[i].key == key {
			field = &t.embedded[i]
		}
	}
	children, ok := v.([]any)
	if field == nil || !ok || children == nil {
		if d.nested > 0 {
			return d.w.value(v)
		}
		return d.tree(v, 1)
	}
	w := d.w
	w.buf = append(w.buf, '[')
	for i, c := range children {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		child, ok := c.(map[string]any)
		if !ok || child == nil {
			if err := w.value(c); err != nil {
				return err
			}
			continue
		}
		if raw, ok := d.reg.get(child); ok {
			w.buf = append(w.buf, raw...)
			continue
		}
		start := len(w.buf)
		d.nested++
		_, err := d.document(field.typ, child, false)
		d.nested--
		if err != nil {
			return err
		}
		d.fresh = append(d.fresh, embeddedDoc{doc: child, json: slices.Clone(w.buf[start:])})
	}
	w.buf = append(w.buf, ']')
	return nil
}

// partsDepth is how deep below a top-level document's fields the JSON of
// objects is kept for the next version (system, system.attributes,
// system.attributes.hp), and partsMinBytes the smallest object kept, and
// partsMinDoc the smallest document whose objects are kept at all: small
// documents cost little to serialise whole.
const (
	partsDepth    = 3
	partsMinBytes = 64
	partsMinDoc   = 2048
)

// tree writes a field's value at depth (1 for a top-level field), taking
// the JSON of objects the previous version shares with this one from it:
// an update replaces only the objects on the paths it changes and shares
// the rest with the version before, so that only what changed is
// serialised again.
func (d *docWriter) tree(v any, depth int) error {
	m, ok := v.(map[string]any)
	if !ok || m == nil || depth > partsDepth {
		return d.w.value(v)
	}
	w := d.w
	start := len(w.buf)
	if raw, ok := d.prev.get(m); ok {
		w.buf = append(w.buf, raw...)
	} else {
		base := len(w.keys)
		for k := range m {
			w.keys = append(w.keys, k)
		}
		slices.Sort(w.keys[base:])
		w.buf = append(w.buf, '{')
		for i := range len(w.keys) - base {
			k := w.keys[base+i] // w.keys may grow (and move) in nested maps
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			w.buf = appendJSONString(w.buf, k)
			w.buf = append(w.buf, ':')
			if err := d.tree(m[k], depth+1); err != nil {
				return err
			}
		}
		w.buf = append(w.buf, '}')
		clear(w.keys[base:])
		w.keys = w.keys[:base]
	}
	if len(w.buf)-start >= partsMinBytes {
		d.parts = append(d.parts, partSpan{src: m, start: start, end: len(w.buf)})
	}
	return nil
}

// partSpan is where an object's JSON is in a document's serialisation.
type partSpan struct {
	src        map[string]any
	start, end int
}

// docParts is the JSON of the objects inside one version of a top-level
// document, by identity: stored documents never change, so the JSON of an
// object stays right for as long as the object lives, in whichever version
// shares it; each part holds its object, so that its address is not
// reused.
type docParts struct {
	doc   unsafe.Pointer // the version they were taken from
	data  []byte         // its full readers' JSON, which the parts are slices of
	parts map[unsafe.Pointer]partSpan
}

// get returns the JSON of an object of the version, if it was kept.
func (p *docParts) get(m map[string]any) ([]byte, bool) {
	if p == nil {
		return nil, false
	}
	s, ok := p.parts[identity(m)]
	if !ok {
		return nil, false
	}
	return p.data[s.start:s.end], true
}

// partsOf returns the kept parts of the latest serialised version of a
// top-level document, or nil.
func (r *embeddedJSON) partsOf(uuid string) *docParts {
	if r == nil {
		return nil
	}
	if v, ok := r.parts.Load(uuid); ok {
		return v.(*docParts)
	}
	return nil
}

// keepParts keeps the parts of a top-level document's version just
// serialised as data (its full readers' JSON), for the next version; for documents big enough to
// gain from it. The latest serialised version wins, committed or not:
// parts are right by identity whatever version they came from.
func (r *embeddedJSON) keepParts(uuid string, doc Document, data []byte, spans []partSpan) {
	if r == nil || len(data) < partsMinDoc || len(spans) == 0 {
		return
	}
	p := &docParts{doc: identity(doc), data: data, parts: make(map[unsafe.Pointer]partSpan, len(spans))}
	for _, s := range spans {
		p.parts[identity(s.src)] = s
	}
	r.parts.Store(uuid, p)
}

// sameData reports whether the kept parts are of the version before and
// its full readers' JSON is equal to full (ok false when that is not
// known).
func (p *docParts) sameData(before Document, full []byte) (same, ok bool) {
	if p == nil || p.doc != identity(before) {
		return false, false
	}
	return bytes.Equal(p.data, full), true
}

// embeddedJSON is an engine's registry of the JSON of the embedded
// documents of its committed state, by identity (the address of their
// map). Stored documents never change, so an entry stays right for as long
// as its document lives; the entry holds the document, so that its address
// is not reused. A commit adds the embedded documents it serialised and
// drops those it replaced or deleted, so the registry follows the state.
type embeddedJSON struct {
	m sync.Map // unsafe.Pointer → *embeddedDoc
	// parts holds, by uuid, the JSON of the objects inside the latest
	// serialised version of each big top-level document (see tree).
	parts sync.Map // uuid → *docParts
}

// embeddedDoc is an embedded document and its JSON.
type embeddedDoc struct {
	doc  Document
	json []byte
}

// get returns the JSON of a registered document.
func (r *embeddedJSON) get(doc Document) ([]byte, bool) {
	if r == nil {
		return nil, false
	}
	if v, ok := r.m.Load(identity(doc)); ok {
		return v.(*embeddedDoc).json, true
	}
	return nil, false
}

// commit follows a committed transaction: it drops the embedded documents
// the changes replaced or deleted, then registers the ones serialised for
// it.
func (r *embeddedJSON) commit(changes []Change, fresh []embeddedDoc) {
	for _, c := range changes {
		if c.After == nil && strings.Count(c.UUID, ".") == 1 {
			r.parts.Delete(c.UUID) // a deleted top-level document
		}
		if c.Before == nil {
			continue
		}
		r.m.Delete(identity(c.Before)) // top-level ones are not registered: no matter
		if c.After == nil || strings.Count(c.UUID, ".") != 1 {
			continue
		}
		// A new version of a top-level document may hold equal copies of
		// embedded documents, which no change reports: drop every embedded
		// document of the old version that the new one does not hold.
		t := docTypes[c.DocumentName]
		if t == nil {
			continue
		}
		kept := map[unsafe.Pointer]bool{}
		eachEmbedded(t, c.After, func(d Document) { kept[identity(d)] = true })
		eachEmbedded(t, c.Before, func(d Document) {
			if id := identity(d); !kept[id] {
				r.m.Delete(id)
			}
		})
	}
	for i := range fresh {
		r.m.Store(identity(fresh[i].doc), &fresh[i])
	}
}

// eachEmbedded calls fn with every embedded document of doc, of type t, at
// any depth.
func eachEmbedded(t *docType, doc Document, fn func(Document)) {
	for _, f := range t.embedded {
		for _, d := range docsOf(doc, f.key) {
			if child, ok := d.(map[string]any); ok {
				fn(child)
				eachEmbedded(f.typ, child, fn)
			}
		}
	}
}

// size returns the number of registered documents.
func (r *embeddedJSON) size() int {
	n := 0
	r.m.Range(func(any, any) bool { n++; return true })
	return n
}
