package script

import (
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"

	"github.com/dop251/goja"

	"github.com/tabletop-relay/relay/world"
)

// exportError is a value that cannot cross into Go.
type exportError struct {
	msg      string
	tooLarge bool
}

func (e *exportError) Error() string {
	if e.tooLarge {
		return "value is too large"
	}
	return e.msg
}

// exporter turns JavaScript values into JSON values with JSON.stringify's
// rules (see the package documentation). It keeps a lower bound of the JSON
// size so that it can give up on an oversized value early; callers that
// need the exact size measure the encoded result.
//
// Reading properties may run script code (getters, proxies, toJSON), which
// panics with a goja exception when it throws or is interrupted; callers in
// Go recover it (see recoveredError), callers inside a native function let
// it propagate to the script.
type exporter struct {
	s      *session
	limit  int
	size   int
	nodes  int
	depth  int
	active map[*goja.Object]bool // the objects being exported, to find cycles
}

func (s *session) newExporter(limit int) *exporter {
	return &exporter{s: s, limit: limit, active: map[*goja.Object]bool{}}
}

// grow adds n bytes to the size and fails past the limit.
func (e *exporter) grow(n int) error {
	e.size += n
	if e.size > e.limit {
		return &exportError{tooLarge: true}
	}
	return nil
}

// export converts v, found under key. present is false for a value JSON
// leaves out (undefined, a function, a symbol).
func (e *exporter) export(key string, v goja.Value) (out any, present bool, err error) {
	if e.nodes++; e.nodes%256 == 0 && e.s.ctx.Err() != nil {
		return nil, false, errStopped
	}
	if obj, ok := v.(*goja.Object); ok {
		if toJSON, ok := goja.AssertFunction(obj.Get("toJSON")); ok {
			if v, err = toJSON(obj, e.s.vm.ToValue(key)); err != nil {
				return nil, false, err
			}
		}
	}
	if v == nil || goja.IsUndefined(v) {
		return nil, false, nil
	}
	if goja.IsNull(v) {
		return nil, true, e.grow(4)
	}
	if _, ok := v.(*goja.Symbol); ok {
		return nil, false, nil
	}
	obj, ok := v.(*goja.Object)
	if !ok {
		return e.primitive(v.Export())
	}
	if _, ok := goja.AssertFunction(obj); ok {
		return nil, false, nil
	}
	switch obj.ClassName() {
	case "Number":
		return e.primitive(obj.ToFloat())
	case "String":
		return e.primitive(obj.String())
	case "Boolean", "BigInt":
		return e.primitive(obj.Export())
	case "Array":
		return e.array(obj)
	default:
		return e.object(obj)
	}
}

func (e *exporter) primitive(x any) (any, bool, error) {
	switch x := x.(type) {
	case int64:
		return float64(x), true, e.grow(1)
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, true, e.grow(4)
		}
		if x == 0 {
			x = 0 // no -0 in JSON
		}
		return x, true, e.grow(1)
	case bool:
		if x {
			return true, true, e.grow(4)
		}
		return false, true, e.grow(5)
	case string:
		return x, true, e.grow(len(x) + 2)
	case *big.Int:
		return nil, false, &exportError{msg: "Do not know how to serialize a BigInt"}
	default:
		return nil, false, &exportError{msg: fmt.Sprintf("cannot convert a value of type %T", x)}
	}
}

// enter marks obj as being exported, failing on a cycle or deep nesting.
func (e *exporter) enter(obj *goja.Object) error {
	if e.active[obj] {
		return &exportError{msg: "Converting circular structure to JSON"}
	}
	if e.depth >= MaxDepth {
		return &exportError{msg: fmt.Sprintf("value nested deeper than %d levels", MaxDepth)}
	}
	e.active[obj] = true
	e.depth++
	return nil
}

func (e *exporter) leave(obj *goja.Object) {
	delete(e.active, obj)
	e.depth--
}

func (e *exporter) array(obj *goja.Object) (any, bool, error) {
	if err := e.enter(obj); err != nil {
		return nil, false, err
	}
	defer e.leave(obj)
	var n int64
	if length := obj.Get("length"); length != nil {
		n = length.ToInteger()
	}
	// Every element takes at least one byte and a separator.
	if err := e.grow(2); err != nil {
		return nil, false, err
	}
	if n > int64(e.limit) {
		return nil, false, &exportError{tooLarge: true}
	}
	out := make([]any, 0, n)
	for i := int64(0); i < n; i++ {
		if i > 0 {
			if err := e.grow(1); err != nil {
				return nil, false, err
			}
		}
		k := strconv.FormatInt(i, 10)
		v, present, err := e.export(k, obj.Get(k))
		if err != nil {
			return nil, false, err
		}
		if !present {
			if err := e.grow(4); err != nil {
				return nil, false, err
			}
		}
		out = append(out, v)
	}
	return out, true, nil
}

func (e *exporter) object(obj *goja.Object) (any, bool, error) {
	if err := e.enter(obj); err != nil {
		return nil, false, err
	}
	defer e.leave(obj)
	if err := e.grow(2); err != nil {
		return nil, false, err
	}
	out := map[string]any{}
	for _, k := range obj.Keys() {
		v, present, err := e.export(k, obj.Get(k))
		if err != nil {
			return nil, false, err
		}
		if !present {
			continue
		}
		// "key": plus a separator
		if err := e.grow(len(k) + 4); err != nil {
			return nil, false, err
		}
		out[k] = v
	}
	return out, true, nil
}

// toJS turns a Go value from the world into a fresh JavaScript value:
// objects and arrays are native ones, not wrappers around the Go value.
func (s *session) toJS(v any) goja.Value {
	vm := s.vm
	switch x := v.(type) {
	case nil:
		return goja.Null()
	case goja.Value:
		return x
	case string, bool, float64, float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return vm.ToValue(x)
	case map[string]any:
		obj := vm.NewObject()
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			// DefineDataProperty, not Set: a "__proto__" key is data.
			_ = obj.DefineDataProperty(k, s.toJS(x[k]), goja.FLAG_TRUE, goja.FLAG_TRUE, goja.FLAG_TRUE)
		}
		return obj
	case []any:
		items := make([]any, len(x))
		for i, item := range x {
			items[i] = s.toJS(item)
		}
		return vm.NewArray(items...)
	case []world.Document:
		items := make([]any, len(x))
		for i, item := range x {
			items[i] = s.toJS(item)
		}
		return vm.NewArray(items...)
	case []string:
		items := make([]any, len(x))
		for i, item := range x {
			items[i] = item
		}
		return vm.NewArray(items...)
	default:
		// Anything else goes through JSON, so the script only ever sees
		// plain data.
		b, err := json.Marshal(x)
		if err != nil {
			return vm.ToValue(fmt.Sprint(x))
		}
		var generic any
		if err := json.Unmarshal(b, &generic); err != nil {
			return vm.ToValue(string(b))
		}
		return s.toJS(generic)
	}
}
