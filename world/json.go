package world

import (
	"encoding/json"
	"math"
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
// are an error naming param.
func normalizeDoc(param string, doc Document) (Document, error) {
	v, err := normalize(doc)
	if err != nil {
		return nil, Errorf(ErrInvalid, "'%s' must be JSON data: %v", param, err)
	}
	m, _ := v.(map[string]any)
	return m, nil
}

// normalizeList normalizes every element of a list into a []any.
func normalizeList[T any](xs []T) (any, error) {
	out := make([]any, len(xs))
	for i, e := range xs {
		n, err := normalize(e)
		if err != nil {
			return nil, err
		}
		out[i] = n
	}
	return out, nil
}

// normalize copies v into plain JSON values. The common types are handled
// directly; anything else takes a trip through encoding/json.
func normalize(v any) (any, error) {
	switch x := v.(type) {
	case nil, bool, string:
		return x, nil
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, errNotFinite
		}
		return x, nil
	case float32:
		return normalize(float64(x))
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
		out := make(map[string]any, len(x))
		for k, e := range x {
			n, err := normalize(e)
			if err != nil {
				return nil, err
			}
			out[k] = n
		}
		return out, nil
	case []any:
		return normalizeList(x)
	case []Document:
		return normalizeList(x)
	default:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, err
		}
		var out any
		if err := json.Unmarshal(b, &out); err != nil {
			return nil, err
		}
		return out, nil
	}
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
