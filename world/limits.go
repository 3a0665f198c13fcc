package world

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// Limits bound the shape of what the world stores, whoever writes it: a
// caller's update or creation, a script, a ruleset operation. Every value a
// caller hands to the world (a document's data, an update diff, a token
// match) is checked when it comes in (see normalizeDoc), and every document
// a transaction writes is measured before the transaction is accepted, so a
// write that would break a limit fails on its own and changes nothing.
type Limits struct {
	// MaxDocumentBytes bounds a top-level document, with its embedded
	// documents, as the JSON the world stores; DefaultMaxDocumentBytes
	// when 0. A write whose result is larger fails with ErrTooLarge, unless
	// it makes a document that is already over the limit (stored before
	// the limit was lowered) no larger, so such documents can be shrunk.
	MaxDocumentBytes int
	// MaxDepth bounds how deeply objects and arrays may nest in a value a
	// caller hands to the world, the value itself counting as the first
	// level, and the dotted keys of an update diff counting as the levels
	// they create; DefaultMaxDepth when 0. Deeper values fail with
	// ErrInvalid.
	MaxDepth int
}

// Defaults of [Limits].
const (
	// DefaultMaxDocumentBytes is 2 MiB: sixty times the demo world's
	// largest actor (34 KB with its items), and small enough that a
	// document, sent whole, fits the 4 MiB a gRPC client accepts by
	// default.
	DefaultMaxDocumentBytes = 2 << 20
	// DefaultMaxDepth is far deeper than tabletop data needs (the demo
	// world's deepest document, an actor with its embedded items, nests
	// 10 levels) and shallow enough that nothing that walks a value
	// recursively, here or in a client, has to care.
	DefaultMaxDepth = 64
)

func (l Limits) maxDocumentBytes() int {
	if l.MaxDocumentBytes <= 0 {
		return DefaultMaxDocumentBytes
	}
	return l.MaxDocumentBytes
}

func (l Limits) maxDepth() int {
	if l.MaxDepth <= 0 {
		return DefaultMaxDepth
	}
	return l.MaxDepth
}

// refusedKeyNames lists the keys the world refuses, for error messages.
const refusedKeyNames = "__proto__, constructor and prototype"

// refusedKey reports whether a key, or one of its dotted parts (with any
// `-=` or `==` prefix), is `__proto__`, `constructor` or `prototype`.
//
// The world itself would store them as plain data, and the script engine
// hands them to scripts as plain data properties (world/script defines
// them rather than assigning them). But documents travel on to JavaScript:
// browser dashboards, bots, the tabletop itself, where merging or
// expanding an object with such a key (`{"__proto__": {"isGM": true}}`,
// `"constructor.prototype.x"`) changes the prototype of every object, a
// classic JavaScript vulnerability. No tabletop data needs these names, so
// the world refuses them at the door rather than hand every client a trap.
func refusedKey(k string) bool {
	if !strings.Contains(k, "__proto__") && !strings.Contains(k, "constructor") && !strings.Contains(k, "prototype") {
		return false
	}
	for part := range strings.SplitSeq(k, ".") {
		for {
			rest, ok := strings.CutPrefix(part, "-=")
			if !ok {
				rest, ok = strings.CutPrefix(part, "==")
			}
			if !ok {
				break
			}
			part = rest
		}
		switch part {
		case "__proto__", "constructor", "prototype":
			return true
		}
	}
	return false
}

// depthOver reports whether v nests deeper than limit levels, v itself
// being at level depth. It stops at the first path that does.
func depthOver(v any, depth, limit int) bool {
	switch x := v.(type) {
	case map[string]any:
		if depth > limit {
			return true
		}
		for _, e := range x {
			if depthOver(e, depth+1, limit) {
				return true
			}
		}
	case []any:
		if depth > limit {
			return true
		}
		for _, e := range x {
			if depthOver(e, depth+1, limit) {
				return true
			}
		}
	}
	return false
}

// checkDocumentSizes refuses a transaction that would store a top-level
// document larger than the limit. It runs under the write lock, before the
// transaction joins the commit queue: a transaction that failed there would
// fail every later one built on it.
//
// Measuring must stay cheap, since every writer waits for it: embedded
// documents whose JSON the engine holds are not walked (see sizer), and a
// large document's new version is measured from its previous version's
// size by walking only what the transaction changed.
func (tx *Tx) checkDocumentSizes(changed []docKey) error {
	e := tx.e
	limit := e.limits.maxDocumentBytes()
	s := sizer{reg: &e.embedded}
	for _, k := range changed {
		p := tx.work[k]
		if p.after == nil {
			delete(e.sizes, k)
			continue
		}
		was := -1
		if m, ok := e.sizes[k]; ok && p.before != nil && m.doc == identity(p.before) {
			was = m.size
		}
		var size int
		if was >= 0 {
			size = was + s.delta(k.typ, p.before, p.after)
		} else {
			size = s.document(k.typ, p.after)
		}
		if size > limit {
			// A document stored before the limit was lowered may shrink,
			// or change without growing.
			if p.before != nil && was < 0 {
				was = s.document(k.typ, p.before)
			}
			if p.before == nil || size > was {
				return Errorf(ErrTooLarge, "%s would be %d bytes of JSON, over the document size limit of %d bytes", k.uuid(), size, limit)
			}
		}
		if size >= memoBytes {
			if e.sizes == nil {
				e.sizes = map[docKey]sizeMemo{}
			}
			e.sizes[k] = sizeMemo{doc: identity(p.after), size: size}
		} else {
			delete(e.sizes, k)
		}
	}
	return nil
}

// memoBytes is the size from which the engine remembers a document's size:
// smaller ones cost less to measure again than to remember.
const memoBytes = 4 << 10

// sizeMemo is the measured size of one version of a top-level document
// (the version is known by its address, which stays taken while the
// memo holds it only if the version is still stored; a memo for a
// version that is gone simply never matches again).
type sizeMemo struct {
	doc  unsafe.Pointer
	size int
}

// documentSize returns the length of the JSON the world stores for a
// top-level document of type t: encodeFull's data.
func documentSize(reg *embeddedJSON, t *docType, doc Document) int {
	s := sizer{reg: reg}
	return s.document(t, doc)
}

// sizer counts the bytes appendJSON and docWriter write, without writing
// them. Embedded documents found in reg are counted by the length of their
// registered JSON.
type sizer struct {
	reg *embeddedJSON
}

// document counts a document of type t, as docWriter.document writes it.
func (s *sizer) document(t *docType, doc map[string]any) int {
	n := 2 + max(len(doc)-1, 0) // braces and commas
	for k, v := range doc {
		n += stringSize(k) + 1 + s.member(t, k, v)
	}
	return n
}

// member counts the value of a document's field: an embedded collection
// document by document, anything else as a plain value.
func (s *sizer) member(t *docType, key string, v any) int {
	field := t.embeddedField(key)
	children, ok := v.([]any)
	if field == nil || !ok || children == nil {
		return valueSize(v)
	}
	n := 2 + max(len(children)-1, 0)
	for _, c := range children {
		n += s.child(field, c)
	}
	return n
}

// child counts one element of an embedded collection.
func (s *sizer) child(field *embeddedField, c any) int {
	doc, ok := c.(map[string]any)
	if !ok || doc == nil {
		return valueSize(c)
	}
	if raw, ok := s.reg.get(doc); ok {
		return len(raw)
	}
	return s.document(field.typ, doc)
}

// delta returns how much longer the JSON of after, a new version of the
// document before of type t (nil for a plain object), is than before's.
// Versions share what did not change, and shared values are skipped
// without a look inside.
func (s *sizer) delta(t *docType, before, after map[string]any) int {
	d := max(len(after)-1, 0) - max(len(before)-1, 0) // commas
	// kept counts the keys of after that before has.
	kept := 0
	for k, v := range after {
		old, had := before[k]
		if !had {
			d += stringSize(k) + 1 + s.anyMember(t, k, v)
			continue
		}
		kept++
		d += s.memberDelta(t, k, old, v)
	}
	if kept == len(before) {
		return d // every key of before is still there
	}
	for k, old := range before {
		if _, has := after[k]; !has {
			d -= stringSize(k) + 1 + s.anyMember(t, k, old)
		}
	}
	return d
}

// anyMember counts a member of a document of type t, or of a plain object
// when t is nil.
func (s *sizer) anyMember(t *docType, key string, v any) int {
	if t == nil {
		return valueSize(v)
	}
	return s.member(t, key, v)
}

// memberDelta returns how much longer the JSON of v is than that of old,
// the value it replaced under key.
func (s *sizer) memberDelta(t *docType, key string, old, v any) int {
	switch x := v.(type) {
	case map[string]any:
		if o, ok := old.(map[string]any); ok && x != nil && o != nil {
			if sameMap(o, x) {
				return 0
			}
			return s.delta(nil, o, x)
		}
	case []any:
		o, ok := old.([]any)
		if !ok {
			break
		}
		if sameSlice(o, x) && (o == nil) == (x == nil) {
			return 0
		}
		var field *embeddedField
		if t != nil {
			field = t.embeddedField(key)
		}
		if field == nil || len(o) != len(x) || o == nil || x == nil {
			return s.anyMember(t, key, v) - s.anyMember(t, key, old)
		}
		// An embedded collection of the same length: most documents are
		// the very ones before, and a changed one shares with its
		// previous version.
		d := 0
		for i, c := range x {
			cm, ok1 := c.(map[string]any)
			om, ok2 := o[i].(map[string]any)
			switch {
			case ok1 && ok2 && cm != nil && om != nil && sameMap(cm, om):
			case ok1 && ok2 && cm != nil && om != nil:
				d += s.delta(field.typ, om, cm)
			default:
				d += s.child(field, c) - s.child(field, o[i])
			}
		}
		return d
	case string:
		if o, ok := old.(string); ok && o == x {
			return 0
		}
	case float64:
		if o, ok := old.(float64); ok && o == x && math.Signbit(o) == math.Signbit(x) {
			return 0
		}
	case bool:
		if o, ok := old.(bool); ok && o == x {
			return 0
		}
	case nil:
		if old == nil {
			return 0
		}
	}
	return s.anyMember(t, key, v) - s.anyMember(t, key, old)
}

// valueSize counts one value, as jsonWriter.value writes it.
func valueSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 4
	case string:
		return stringSize(x)
	case float64:
		return floatSize(x)
	case bool:
		if x {
			return 4
		}
		return 5
	case map[string]any:
		if x == nil {
			return 4
		}
		n := 2 + max(len(x)-1, 0)
		for k, e := range x {
			n += stringSize(k) + 1 + valueSize(e)
		}
		return n
	case []any:
		if x == nil {
			return 4
		}
		n := 2 + max(len(x)-1, 0)
		for _, e := range x {
			n += valueSize(e)
		}
		return n
	default:
		// Never so in stored documents, which hold only the types above.
		b, _ := json.Marshal(x)
		return len(b)
	}
}

// floatSize is the length of appendJSONFloat's output.
func floatSize(f float64) int {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 4 // never stored; counted as the null it cannot be
	}
	if f == math.Trunc(f) && math.Abs(f) < 1e15 && !(f == 0 && math.Signbit(f)) {
		// Whole numbers, the usual case, print as their digits.
		i, n := int64(f), 1
		if i < 0 {
			i, n = -i, 2
		}
		for ; i >= 10; i /= 10 {
			n++
		}
		return n
	}
	var buf [32]byte
	return len(appendJSONFloat(buf[:0], f))
}

// stringSize is the length of appendJSONString's output.
func stringSize(s string) int {
	n := 2
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			switch {
			case b >= 0x20 && b != '"' && b != '\\':
				n++
			case b == '\\' || b == '"' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
				n += 2
			default:
				n += 6
			}
			i++
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case c == utf8.RuneError && size == 1:
			n += 6
		case c == '\u2028' || c == '\u2029':
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// embeddedField returns the embedded collection a document of type t holds
// under key, or nil.
func (t *docType) embeddedField(key string) *embeddedField {
	if i := slices.IndexFunc(t.embedded, func(f embeddedField) bool { return f.key == key }); i >= 0 {
		return &t.embedded[i]
	}
	return nil
}
