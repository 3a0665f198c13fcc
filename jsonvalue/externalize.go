package jsonvalue

import (
	"bytes"
	"strings"
	"sync"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// valueName is the full name of google.protobuf.Value.
const valueName = "google.protobuf.Value"

// MayHoldRaw reports whether a message of type md can hold a raw Value:
// whether it has a google.protobuf.Value field, or a field of a message
// type that can (google.protobuf's own types aside: a raw Value is never
// put inside a Value tree). Only such messages need Externalize.
func MayHoldRaw(md protoreflect.MessageDescriptor) bool {
	if v, ok := holdsRaw.Load(md.FullName()); ok {
		return v.(bool)
	}
	v := mayHoldRaw(md, map[protoreflect.FullName]bool{})
	holdsRaw.Store(md.FullName(), v)
	return v
}

// holdsRaw caches MayHoldRaw by message name.
var holdsRaw sync.Map

func mayHoldRaw(md protoreflect.MessageDescriptor, seen map[protoreflect.FullName]bool) bool {
	if seen[md.FullName()] {
		return false
	}
	seen[md.FullName()] = true
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		sub := fd.Message()
		switch {
		case sub == nil:
		case sub.FullName() == valueName:
			return true
		case sub.ParentFile().Package() == "google.protobuf":
		case mayHoldRaw(sub, seen):
			return true
		}
	}
	return false
}

// Externalize appends to dst the protobuf encoding of a message of type
// md whose encoding is src, with every raw Value replaced by the real
// Value tree its JSON stands for (see AppendValue): what a gRPC caller
// must receive. The encodings of large texts are kept for the next time
// the same text comes (see wireCache). src is what proto.Marshal wrote for the message, in which
// a raw Value appears as its string_value and its marker; everything else
// is copied as it is.
func Externalize(dst, src []byte, md protoreflect.MessageDescriptor) ([]byte, error) {
	return externalize(dst, src, md, transcoded)
}

// externalize is Externalize with the given cache (none when nil).
func externalize(dst, src []byte, md protoreflect.MessageDescriptor, cache *wireCache) ([]byte, error) {
	fields := md.Fields()
	for len(src) > 0 {
		num, typ, n := protowire.ConsumeTag(src)
		if n < 0 {
			return dst, protowire.ParseError(n)
		}
		m := protowire.ConsumeFieldValue(num, typ, src[n:])
		if m < 0 {
			return dst, protowire.ParseError(m)
		}
		field := src[:n+m]
		src = src[n+m:]
		fd := fields.ByNumber(num)
		if typ != protowire.BytesType || fd == nil || fd.Kind() != protoreflect.MessageKind {
			dst = append(dst, field...)
			continue
		}
		content, _ := protowire.ConsumeBytes(field[n:])
		sub := fd.Message()
		if sub.FullName() == valueName {
			raw, ok := rawValueWire(content)
			if !ok {
				dst = append(dst, field...)
				continue
			}
			dst = append(dst, field[:n]...) // the tag
			wire, key, ok := cache.get(raw)
			if ok {
				dst = protowire.AppendBytes(dst, wire)
				continue
			}
			t, size, err := measured(raw)
			if err != nil {
				return dst, err
			}
			dst = protowire.AppendVarint(dst, uint64(size))
			start := len(dst)
			dst = t.write(dst)
			putTranscoder(t)
			cache.put(key, raw, dst[start:])
			continue
		}
		if !MayHoldRaw(sub) {
			dst = append(dst, field...)
			continue
		}
		inner, err := externalize(nil, content, sub, cache)
		if err != nil {
			return dst, err
		}
		dst = append(dst, field[:n]...)
		dst = protowire.AppendBytes(dst, inner)
	}
	return dst, nil
}

// rawValueWire reads the encoding of a raw Value (its string_value, then
// its marker, as proto.Marshal writes them) and returns the JSON text.
func rawValueWire(b []byte) ([]byte, bool) {
	if len(b) == 0 || b[0] != tagString {
		return nil, false
	}
	raw, n := protowire.ConsumeBytes(b[1:])
	if n < 0 || !bytes.Equal(b[1+n:], valueMarker) {
		return nil, false
	}
	return raw, true
}

// Sanitized returns a copy of m in which the text of every raw Value that
// is not valid UTF-8 has each invalid sequence replaced by U+FFFD, at any
// depth. protobuf refuses to encode a string_value that is not UTF-8, and
// a raw Value's text comes from elsewhere (a linked tabletop's reply, for
// one), so the gRPC codec falls back on this when encoding fails: the
// caller gets the value with U+FFFD where its text was broken, as the
// transcoder and encoding/json would read it.
func Sanitized(m proto.Message) proto.Message {
	c := proto.Clone(m)
	sanitize(c.ProtoReflect())
	return c
}

func sanitize(m protoreflect.Message) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Message() == nil:
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if fixed, ok := sanitizedValue(fd.Message(), l.Get(i)); ok {
					l.Set(i, fixed)
				} else if fd.Message().FullName() != valueName {
					sanitize(l.Get(i).Message())
				}
			}
		case fd.IsMap():
			mv := fd.MapValue()
			if mv.Message() == nil {
				break
			}
			mp := v.Map()
			mp.Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				if fixed, ok := sanitizedValue(mv.Message(), e); ok {
					mp.Set(k, fixed)
				} else if mv.Message().FullName() != valueName {
					sanitize(e.Message())
				}
				return true
			})
		default:
			if fixed, ok := sanitizedValue(fd.Message(), v); ok {
				m.Set(fd, fixed)
			} else if fd.Message().FullName() != valueName {
				sanitize(v.Message())
			}
		}
		return true
	})
}

// sanitizedValue returns a raw Value with valid text for a raw Value of md
// whose text is not UTF-8, and false for anything else.
func sanitizedValue(md protoreflect.MessageDescriptor, v protoreflect.Value) (protoreflect.Value, bool) {
	if md.FullName() != valueName {
		return v, false
	}
	raw, ok := RawJSON(v.Message().Interface())
	if !ok || utf8.Valid(raw) {
		return v, false
	}
	return protoreflect.ValueOfMessage(Raw([]byte(strings.ToValidUTF8(string(raw), "\uFFFD"))).ProtoReflect()), true
}
