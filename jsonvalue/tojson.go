package jsonvalue

import (
	"errors"
	"math"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/internal/jsonscan"
)

// errNotJSON is returned for a Value that JSON cannot hold: a number that
// is NaN or infinite, or a Value with no kind set.
var errNotJSON = errors.New("jsonvalue: the Value holds no JSON value (NaN, an infinity, or no kind)")

// AppendJSON appends the compact JSON text of a Value tree to dst (a raw
// Value's text as it is). Members come in the Struct's map order, which
// varies; numbers are written as encoding/json writes a float64. It is
// several times faster than protojson, which a client decoding every
// document it reads would otherwise pay for.
func AppendJSON(dst []byte, v *structpb.Value) ([]byte, error) {
	if raw, ok := RawJSON(v); ok {
		return append(dst, raw...), nil
	}
	return appendTree(dst, v, 0)
}

func appendTree(dst []byte, v *structpb.Value, depth int) ([]byte, error) {
	if depth > maxDepth {
		return dst, ErrTooDeep
	}
	switch k := v.GetKind().(type) {
	case *structpb.Value_NullValue:
		return append(dst, "null"...), nil
	case *structpb.Value_BoolValue:
		return strconv.AppendBool(dst, k.BoolValue), nil
	case *structpb.Value_NumberValue:
		return appendNumber(dst, k.NumberValue)
	case *structpb.Value_StringValue:
		return AppendQuoted(dst, k.StringValue), nil
	case *structpb.Value_StructValue:
		dst = append(dst, '{')
		first := true
		for name, member := range k.StructValue.GetFields() {
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = AppendQuoted(dst, name)
			dst = append(dst, ':')
			var err error
			if dst, err = appendTree(dst, member, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	case *structpb.Value_ListValue:
		dst = append(dst, '[')
		for i, e := range k.ListValue.GetValues() {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendTree(dst, e, depth+1); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	}
	return dst, errNotJSON
}

// appendNumber writes a number as encoding/json writes a float64: plain
// decimals from 1e-6 to below 1e21, an exponent outside.
func appendNumber(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return dst, errNotJSON
	}
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		start := len(dst)
		dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
		// `1e-07` becomes `1e-7`, as JSON encoders write it.
		if n := len(dst); n-start >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
		return dst, nil
	}
	return strconv.AppendFloat(dst, f, 'f', -1, 64), nil
}

// AppendQuoted appends s as a JSON string, escaped as protojson escapes
// it; invalid UTF-8 becomes U+FFFD. The gateway's REST encoder uses it too,
// so REST answers and Value trees quote strings the same way.
func AppendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			if len(s)-i >= jsonscan.MinRun {
				i += jsonscan.PlainASCII(s[i:])
			} else {
				i++
			}
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
