package world

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// This file holds the helpers that work on JSON-shaped values: deep copies,
// normalisation of caller input and dotted property paths.
//
// Every document the world stores is immutable: it is built fresh (by
// normalize or deepCopy), finished, and from then on only read. New versions
// share unchanged parts with old ones, which is safe only because nothing is
// ever changed in place.

// Clone returns a deep copy of a document, for callers that hold a read-only
// document (from a [View]) and need one they may change.
func Clone(doc Document) Document {
	if doc == nil {
		return nil
	}
	return deepCopyMap(doc)
}

// deepCopy copies a JSON value (map[string]any, []any, string, float64,
// bool, nil) recursively.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		return deepCopyMap(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	default:
		return v
	}
}

func deepCopyMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = deepCopy(v)
	}
	return out
}

// normalizeDoc turns a caller's document into a fresh one made only of JSON
// values: integers become float64, typed maps and slices become
// map[string]any and []any. Values JSON cannot carry (NaN, channels, ...)
// are an error naming param, and so are the shapes the world refuses (see
// [Limits]): nesting deeper than lim.MaxDepth levels and keys that
// JavaScript gives a meaning to.
func normalizeDoc(param string, doc Document, lim Limits) (Document, error) {
	n := normalizer{param: param, maxDepth: lim.maxDepth()}
	v, err := n.value(doc, 1)
	if err != nil {
		var werr *Error
		if errors.As(err, &werr) {
			return nil, err
		}
		return nil, Errorf(ErrInvalid, "'%s' must be JSON data: %v", param, err)
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// normalizer copies a caller's value into plain JSON values (see
// normalizeDoc). path holds the keys and indexes from the root down to the
// value being copied, for error messages.
type normalizer struct {
	param    string
	maxDepth int
	path     []pathStep
}

// pathStep is one step of a normalizer's path: an array index when index
// is not negative, else a key.
type pathStep struct {
	key   string
	index int
}

// value copies v, which sits at the given depth (the top-level document is
// at depth 1). The common types are handled directly; anything else takes a
// trip through encoding/json and is then copied as its JSON.
func (n *normalizer) value(v any, depth int) (any, error) {
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errNotFinite
		}
		return x, nil
	case float32:
		return n.value(float64(x), depth)
	case int:
		return float64(x), nil
	case int32:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case Role:
		return float64(x), nil
	case Level:
		return float64(x), nil
	case map[string]any:
		if err := n.enter(depth); err != nil {
			return nil, err
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			n.path = append(n.path, pathStep{key: k, index: -1})
			if refusedKey(k) {
				return nil, n.keyError(k)
			}
			c, err := n.value(e, depth+1)
			if err != nil {
				return nil, err
			}
			n.path = n.path[:len(n.path)-1]
			out[k] = c
		}
		return out, nil
	case []any:
		return normalizeList(n, x, depth)
	case []Document:
		return normalizeList(n, x, depth)
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		var out any
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
		return n.value(out, depth)
	}
}

// normalizeList copies every element of a list into a []any.
func normalizeList[T any](n *normalizer, xs []T, depth int) (any, error) {
	if err := n.enter(depth); err != nil {
		return nil, err
	}
	out := make([]any, len(xs))
	for i, e := range xs {
		n.path = append(n.path, pathStep{index: i})
		c, err := n.value(e, depth+1)
		if err != nil {
			return nil, err
		}
		n.path = n.path[:len(n.path)-1]
		out[i] = c
	}
	return out, nil
}

// enter fails when an object or array at depth is past the depth limit.
func (n *normalizer) enter(depth int) error {
	if depth > n.maxDepth {
		return Errorf(ErrInvalid, "'%s' nests deeper than the limit of %d levels (at %s)", n.param, n.maxDepth, n.where())
	}
	return nil
}

// keyError refuses a key that JavaScript gives a meaning to.
func (n *normalizer) keyError(k string) error {
	return Errorf(ErrInvalid, "'%s' holds the key %q (at %s): keys named %s are refused", n.param, clip(k, maxKeyShown), n.where(), refusedKeyNames)
}

// Bounds of the paths and keys an error message shows: a caller's keys may
// be long, and a message is not the place to echo them whole.
const (
	maxKeyShown  = 40
	maxPathShown = 200
)

// where spells the path of the value being copied: `data.items.3.name`,
// each key cut to maxKeyShown bytes and the whole to about maxPathShown,
// keeping its start and its end.
func (n *normalizer) where() string {
	var b strings.Builder
	b.WriteString(n.param)
	for _, p := range n.path {
		b.WriteByte('.')
		if p.index >= 0 {
			b.WriteString(strconv.Itoa(p.index))
		} else {
			b.WriteString(clip(p.key, maxKeyShown))
		}
	}
	path := b.String()
	if len(path) > maxPathShown {
		path = strings.ToValidUTF8(path[:maxPathShown/2]+"..."+path[len(path)-maxPathShown/2:], "")
	}
	return path
}

// clip cuts s to at most limit bytes (and whole characters), marking the cut.
func clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	return strings.ToValidUTF8(s[:limit], "") + "..."
}

// jsonError is an error normalize finds in a value.
type jsonError string

func (e jsonError) Error() string { return string(e) }

// errNotFinite rejects NaN and the infinities, which JSON cannot carry.
const errNotFinite = jsonError("numbers must be finite")

// Property reads the value at a dotted path (`system.attributes.hp.value`)
// of a document. It descends through objects only, never into arrays.
func Property(doc Document, path string) (any, bool) {
	var cur any = doc
	for path != "" {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		var key string
		key, path, _ = strings.Cut(path, ".")
		if cur, ok = m[key]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// jsTypeOf names a value's type the way JavaScript's typeof does, for error
// messages that follow the tabletop's wording.
func jsTypeOf(v any, present bool) string {
	if !present {
		return "undefined"
	}
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	default: // null, objects and arrays
		return "object"
	}
}

// number returns v as a float64 when it is a JSON number.
func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// str returns v as a string, or "" when it is not one.
func str(v any) string {
	s, _ := v.(string)
	return s
}

// docName returns a document's name, or "" when it has none.
func docName(doc Document) string { return str(doc["name"]) }

// sameSlice reports whether two slices are the same slice, which with
// immutable documents means unchanged.
func sameSlice(a, b []any) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// docsOf returns the embedded documents held in field key of doc.
func docsOf(doc Document, key string) []any {
	a, _ := doc[key].([]any)
	return a
}

// indexOf returns the position of the embedded document with the given id,
// or -1.
func indexOf(docs []any, id string) int {
	for i, d := range docs {
		if m, ok := d.(map[string]any); ok && m["_id"] == id {
			return i
		}
	}
	return -1
}

// SameJSON reports whether two world values (the types JSON decodes to)
// are equal, as reflect.DeepEqual would, but at once for the objects and
// arrays they share: the way to compare versions of a document, which
// share everything a change did not touch.
func SameJSON(a, b any) bool { return treeEqual(a, b) }

// treeEqual reports whether two world values are equal, as
// reflect.DeepEqual would for the types JSON decodes to, but stopping at
// once on objects and arrays the two share: versions of a document share
// everything a change did not touch, so comparing them costs the size of
// the change rather than of the document.
func treeEqual(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || (a == nil) != (b == nil) || len(a) != len(b) {
			return false
		}
		if identity(a) == identity(b) {
			return true
		}
		for k, av := range a {
			bv, ok := b[k]
			if !ok || !treeEqual(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || (a == nil) != (b == nil) || len(a) != len(b) {
			return false
		}
		if len(a) > 0 && &a[0] == &b[0] {
			return true
		}
		for i := range a {
			if !treeEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case string:
		b, ok := b.(string)
		return ok && a == b
	case float64:
		b, ok := b.(float64)
		return ok && a == b
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case nil:
		return b == nil
	}
	return reflect.DeepEqual(a, b)
}
