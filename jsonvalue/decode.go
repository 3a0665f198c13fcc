package jsonvalue

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// decodePlain decodes a JSON object into plain Go values exactly as
// json.Unmarshal into a map[string]any does, for the usual text: valid
// JSON whose strings hold no escapes and are valid UTF-8, and whose
// numbers fit a float64. It skips encoding/json's reflection (a REST
// update's data is decoded on every call). ok is false for any other text,
// which json.Unmarshal then decodes, or refuses with its reasons.
func decodePlain(raw []byte) (m map[string]any, ok bool) {
	if !json.Valid(raw) {
		return nil, false
	}
	d := plainDecoder{b: raw}
	d.space()
	if d.i >= len(d.b) || d.b[d.i] != '{' {
		return nil, false
	}
	v, ok := d.value()
	if !ok {
		return nil, false
	}
	return v.(map[string]any), true
}

// plainDecoder reads valid JSON text.
type plainDecoder struct {
	b []byte
	i int
}

func (d *plainDecoder) space() {
	for d.i < len(d.b) && (d.b[d.i] == ' ' || d.b[d.i] == '\t' || d.b[d.i] == '\r' || d.b[d.i] == '\n') {
		d.i++
	}
}

// value reads the value at d.i and the space after it.
func (d *plainDecoder) value() (any, bool) {
	var v any
	switch c := d.b[d.i]; c {
	case '{':
		m := map[string]any{}
		v = m
		d.i++
		d.space()
		if d.b[d.i] == '}' {
			d.i++
			break
		}
		for {
			k, ok := d.str()
			if !ok {
				return nil, false
			}
			d.space()
			d.i++ // the colon
			d.space()
			if m[k], ok = d.value(); !ok {
				return nil, false
			}
			c := d.b[d.i]
			d.i++
			if c == '}' {
				break
			}
			d.space()
		}
	case '[':
		a := []any{}
		d.i++
		d.space()
		if d.b[d.i] == ']' {
			d.i++
			v = a
			break
		}
		for {
			e, ok := d.value()
			if !ok {
				return nil, false
			}
			a = append(a, e)
			c := d.b[d.i]
			d.i++
			if c == ']' {
				break
			}
			d.space()
		}
		v = a
	case '"':
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		v = s
	case 't':
		v, d.i = true, d.i+4
	case 'f':
		v, d.i = false, d.i+5
	case 'n':
		v, d.i = nil, d.i+4
	default:
		start := d.i
		for d.i < len(d.b) && isNumberByte(d.b[d.i]) {
			d.i++
		}
		f, err := strconv.ParseFloat(string(d.b[start:d.i]), 64)
		if err != nil {
			return nil, false
		}
		v = f
	}
	d.space()
	return v, true
}

// str reads the string at d.i when it has no escapes and is valid UTF-8.
func (d *plainDecoder) str() (string, bool) {
	end := bytes.IndexByte(d.b[d.i+1:], '"')
	s := d.b[d.i+1 : d.i+1+end]
	if bytes.IndexByte(s, '\\') >= 0 || !utf8.Valid(s) {
		return "", false
	}
	d.i += end + 2
	return string(s), true
}

// isNumberByte reports whether c may be part of a JSON number.
func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E'
}
