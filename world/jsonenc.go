package world

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/internal/jsonscan"
)

// A fast path for EncodeJSON. World data is trees of the types JSON
// decodes to (map[string]any, []any, string, float64, bool, nil), and
// encoding/json spends most of its time on reflection and on sorting map
// keys through reflect values when it writes them. appendJSON writes those
// types directly, byte for byte as encoding/json does (keys sorted,
// SetEscapeHTML(false)); any other type is handed to encoding/json, so the
// output never differs.

// jsonWriter holds the scratch space of one serialisation.
type jsonWriter struct {
	buf  []byte
	keys []string // a stack of the keys of the maps being written
}

var jsonWriters = sync.Pool{New: func() any { return &jsonWriter{} }}

// encodeJSON serialises v as encoding/json does with HTML escaping off,
// without a trailing newline.
func encodeJSON(v any) ([]byte, error) {
	w := jsonWriters.Get().(*jsonWriter)
	defer w.release()
	if err := w.value(v); err != nil {
		return nil, err
	}
	return bytes.Clone(w.buf), nil
}

// release returns a writer to the pool, unless it grew too big to keep.
func (w *jsonWriter) release() {
	clear(w.keys)
	w.keys = w.keys[:0]
	if cap(w.buf) <= 1<<20 {
		w.buf = w.buf[:0]
		jsonWriters.Put(w)
	}
}

// value appends one value.
func (w *jsonWriter) value(v any) error {
	switch v := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case string:
		w.buf = appendJSONString(w.buf, v)
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return w.fallback(v) // encoding/json's error
		}
		w.buf = appendJSONFloat(w.buf, v)
	case bool:
		w.buf = strconv.AppendBool(w.buf, v)
	case map[string]any:
		return w.object(v)
	case []any:
		if v == nil {
			w.buf = append(w.buf, "null"...)
			return nil
		}
		w.buf = append(w.buf, '[')
		for i, e := range v {
			if i > 0 {
				w.buf = append(w.buf, ',')
			}
			if err := w.value(e); err != nil {
				return err
			}
		}
		w.buf = append(w.buf, ']')
	default:
		return w.fallback(v)
	}
	return nil
}

// object appends a map, keys sorted.
func (w *jsonWriter) object(m map[string]any) error {
	if m == nil {
		w.buf = append(w.buf, "null"...)
		return nil
	}
	base := len(w.keys)
	for k := range m {
		w.keys = append(w.keys, k)
	}
	keys := w.keys[base:]
	slices.Sort(keys)
	w.buf = append(w.buf, '{')
	for i := range len(keys) {
		k := w.keys[base+i] // w.keys may grow (and move) in nested maps
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = appendJSONString(w.buf, k)
		w.buf = append(w.buf, ':')
		if err := w.value(m[k]); err != nil {
			return err
		}
	}
	w.buf = append(w.buf, '}')
	clear(w.keys[base:])
	w.keys = w.keys[:base]
	return nil
}

// fallback appends a value of another type with encoding/json itself.
func (w *jsonWriter) fallback(v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	w.buf = append(w.buf, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
	return nil
}

// appendJSONFloat appends a finite number as encoding/json does: like
// ES6's number to string conversion.
func appendJSONFloat(b []byte, f float64) []byte {
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-09 becomes e-9
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends a quoted string as encoding/json does without
// HTML escaping: control characters, quotes and backslashes escaped,
// invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' {
				if len(s)-i >= jsonscan.MinRun {
					i += jsonscan.PlainASCII(s[i:])
				} else {
					i++
				}
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
