package world

import (
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
	if _, ok := doc["uuid"]; ok || doc == nil {
		// Never so in practice (writes drop it); keep it simple then.
		if data, err = encodeDoc(doc); err != nil {
			return nil, nil, nil, err
		}
		withUUID := make(map[string]any, len(doc))
		for k, v := range doc {
			withUUID[k] = v
		}
		withUUID["uuid"] = uuid
		full, err = EncodeJSON(withUUID)
		return full, data, nil, err
	}
	w := jsonWriters.Get().(*jsonWriter)
	defer w.release()
	d := docWriter{w: w, reg: reg}
	at, err := d.document(t, doc, true)
	if err != nil {
		return nil, nil, nil, err
	}
	data = slices.Clone(w.buf)
	// The member, with the comma that separates it from its neighbour.
	member := append([]byte(nil), `"uuid":`...)
	member = appendJSONString(member, uuid)
	switch {
	case len(doc) == 0:
	case data[at] == '}': // last member
		member = append([]byte{','}, member...)
	default:
		member = append(member, ',')
	}
	full = make([]byte, 0, len(data)+len(member))
	full = append(full, data[:at]...)
	full = append(full, member...)
	full = append(full, data[at:]...)
	return full, data, d.fresh, nil
}

// docWriter writes documents, taking their embedded documents from a
// registry when it can.
type docWriter struct {
	w     *jsonWriter
	reg   *embeddedJSON
	fresh []embeddedDoc
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
		}
		w.buf = appendJSONString(w.buf, k)
		w.buf = append(w.buf, ':')
		if err := d.member(t, k, doc[k]); err != nil {
			return 0, err
		}
	}
	if uuidAt < 0 {
		uuidAt = len(w.buf)
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
		return d.w.value(v)
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
		if _, err := d.document(field.typ, child, false); err != nil {
			return err
		}
		d.fresh = append(d.fresh, embeddedDoc{doc: child, json: slices.Clone(w.buf[start:])})
	}
	w.buf = append(w.buf, ']')
	return nil
}

// embeddedJSON is an engine's registry of the JSON of the embedded
// documents of its committed state, by identity (the address of their
// map). Stored documents never change, so an entry stays right for as long
// as its document lives; the entry holds the document, so that its address
// is not reused. A commit adds the embedded documents it serialised and
// drops those it replaced or deleted, so the registry follows the state.
type embeddedJSON struct {
	m sync.Map // unsafe.Pointer → *embeddedDoc
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
