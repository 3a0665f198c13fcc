package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// obj is a JSON object that keeps its members in the order they were set,
// so the document reads in a sensible order (info before paths, a message's
// fields in proto order) and is the same bytes on every run.
type obj struct {
	keys []string
	vals map[string]any
}

// newObj returns an object holding the given key, value pairs in order.
func newObj(pairs ...any) *obj {
	o := &obj{vals: map[string]any{}}
	for i := 0; i+1 < len(pairs); i += 2 {
		o.set(pairs[i].(string), pairs[i+1])
	}
	return o
}

// set adds a member, or replaces its value in place when it exists.
func (o *obj) set(key string, v any) *obj {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
	return o
}

// get returns a member's value, or nil.
func (o *obj) get(key string) any {
	if o == nil {
		return nil
	}
	return o.vals[key]
}

// has reports whether the object has the member.
func (o *obj) has(key string) bool {
	_, ok := o.vals[key]
	return ok
}

// clone copies the object and, recursively, the objects and arrays in it.
func (o *obj) clone() *obj {
	c := newObj()
	for _, k := range o.keys {
		c.set(k, cloneValue(o.vals[k]))
	}
	return c
}

func cloneValue(v any) any {
	switch t := v.(type) {
	case *obj:
		return t.clone()
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = cloneValue(e)
		}
		return out
	}
	return v
}

// MarshalJSON writes the members in order.
func (o *obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		val, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		b.Write(val)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeOrdered reads a JSON value, objects as *obj in the order written,
// numbers as json.Number.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := newObj()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(kt.(string), v)
			}
			_, err := dec.Token()
			return o, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	}
	return tok, nil
}
