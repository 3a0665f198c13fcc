package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"sort"
	"strconv"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// appendMessage appends a message as JSON the way the contract shows it:
// protojson's mapping with every field present (unset messages as null,
// zero values as zero), lowerCamelCase names, and raw Values (the
// `raw_json` fields the services fill, see package jsonvalue) spliced in
// as the JSON they hold. Unlike protojson the output is compact and
// stable, and documents are copied, not converted: the world hands them
// over already serialised.
func appendMessage(buf []byte, m protoreflect.Message) ([]byte, error) {
	md := m.Descriptor()
	if md.FullName().Parent() == "google.protobuf" {
		return appendWellKnown(buf, m)
	}
	buf = append(buf, '{')
	fields := md.Fields()
	first := true
	for i := range fields.Len() {
		fd := fields.Get(i)
		if fd.ContainingOneof() != nil && !m.Has(fd) {
			// protojson leaves out unset oneof members (proto3 optional
			// included); responses use wrappers where a null must show.
			continue
		}
		if isOmitEmpty(fd) && !fd.IsList() && !fd.IsMap() && !m.Has(fd) {
			// A detail the caller did not ask for is left out, not null.
			continue
		}
		if !first {
			buf = append(buf, ',')
		}
		first = false
		buf = appendString(buf, fd.JSONName())
		buf = append(buf, ':')
		var err error
		switch {
		case fd.IsList():
			buf, err = appendList(buf, fd, m.Get(fd).List())
		case fd.IsMap():
			buf, err = appendMap(buf, fd, m.Get(fd).Map())
		case fd.Message() != nil && !m.Has(fd):
			buf = append(buf, "null"...)
		default:
			buf, err = appendValue(buf, fd, m.Get(fd))
		}
		if err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

func appendList(buf []byte, fd protoreflect.FieldDescriptor, l protoreflect.List) ([]byte, error) {
	buf = append(buf, '[')
	for i := range l.Len() {
		if i > 0 {
			buf = append(buf, ',')
		}
		var err error
		if buf, err = appendValue(buf, fd, l.Get(i)); err != nil {
			return nil, err
		}
	}
	return append(buf, ']'), nil
}

// appendMap writes a map with its keys sorted, so equal maps are equal bytes.
func appendMap(buf []byte, fd protoreflect.FieldDescriptor, mp protoreflect.Map) ([]byte, error) {
	keys := make([]protoreflect.MapKey, 0, mp.Len())
	mp.Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
		keys = append(keys, k)
		return true
	})
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	buf = append(buf, '{')
	for i, k := range keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendString(buf, k.String())
		buf = append(buf, ':')
		var err error
		if buf, err = appendValue(buf, fd.MapValue(), mp.Get(k)); err != nil {
			return nil, err
		}
	}
	return append(buf, '}'), nil
}

// appendValue writes one singular value of a field.
func appendValue(buf []byte, fd protoreflect.FieldDescriptor, v protoreflect.Value) ([]byte, error) {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return strconv.AppendBool(buf, v.Bool()), nil
	case protoreflect.StringKind:
		return appendString(buf, v.String()), nil
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return strconv.AppendInt(buf, v.Int(), 10), nil
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return strconv.AppendUint(buf, v.Uint(), 10), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return strconv.AppendQuote(buf, strconv.FormatInt(v.Int(), 10)), nil
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return strconv.AppendQuote(buf, strconv.FormatUint(v.Uint(), 10)), nil
	case protoreflect.FloatKind:
		return appendFloat(buf, v.Float(), 32), nil
	case protoreflect.DoubleKind:
		return appendFloat(buf, v.Float(), 64), nil
	case protoreflect.EnumKind:
		if ev := fd.Enum().Values().ByNumber(v.Enum()); ev != nil {
			return appendString(buf, string(ev.Name())), nil
		}
		return strconv.AppendInt(buf, int64(v.Enum()), 10), nil
	case protoreflect.BytesKind:
		buf = append(buf, '"')
		buf = base64.StdEncoding.AppendEncode(buf, v.Bytes())
		return append(buf, '"'), nil
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return appendMessage(buf, v.Message())
	}
	return append(buf, "null"...), nil
}

// isOmitEmpty reports whether a field carries the omit_empty option.
func isOmitEmpty(fd protoreflect.FieldDescriptor) bool {
	opts := fd.Options()
	if opts == nil {
		return false
	}
	omit, _ := proto.GetExtension(opts, relayv1.E_OmitEmpty).(bool)
	return omit
}

// appendRawJSON splices JSON text in, on one line; empty is null. The
// relay's own JSON (documents, results, events) is already compact and is
// copied as it is: compacting a 33 KB document again cost nearly half the
// CPU of a read. Text with a line break is compacted, so a body never spans
// lines.
func appendRawJSON(buf []byte, raw []byte) ([]byte, error) {
	if len(raw) == 0 {
		return append(buf, "null"...), nil
	}
	if bytes.IndexByte(raw, '\n') < 0 && bytes.IndexByte(raw, '\r') < 0 {
		return append(buf, raw...), nil
	}
	out := bytes.NewBuffer(buf)
	if err := json.Compact(out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// appendFloat writes a number exactly as protojson does: in plain decimal
// notation unless its magnitude is below 1e-6 or at least 1e21 (then with an
// exponent of at least one digit, `1e-7`), and NaN and the infinities as
// strings. A file size of 1234567 is `1234567`, never `1.234567e+06`.
func appendFloat(buf []byte, f float64, bits int) []byte {
	switch {
	case math.IsNaN(f):
		return append(buf, `"NaN"`...)
	case math.IsInf(f, 1):
		return append(buf, `"Infinity"`...)
	case math.IsInf(f, -1):
		return append(buf, `"-Infinity"`...)
	}
	abs := math.Abs(f)
	if bits == 32 {
		abs = float64(float32(abs))
	}
	if abs == 0 || (abs >= 1e-6 && abs < 1e21) {
		return strconv.AppendFloat(buf, f, 'f', -1, bits)
	}
	start := len(buf)
	buf = strconv.AppendFloat(buf, f, 'e', -1, bits)
	// strconv writes two exponent digits at least (`1e-07`); JSON
	// encoders write as few as needed.
	if n := len(buf) - start; n >= 4 && buf[len(buf)-4] == 'e' && buf[len(buf)-2] == '0' {
		buf[len(buf)-2] = buf[len(buf)-1]
		buf = buf[:len(buf)-1]
	}
	return buf
}

// appendWellKnown writes google.protobuf types (wrappers, Struct, Value,
// Timestamp, ...) with protojson, which knows their special forms, but for
// raw Values (package jsonvalue), whose JSON text it copies.
func appendWellKnown(buf []byte, m protoreflect.Message) ([]byte, error) {
	if raw, ok := jsonvalue.RawJSON(m.Interface()); ok {
		// JSON the relay holds serialised (a document, a result, an
		// event's payload): spliced in as it is.
		return appendRawJSON(buf, raw)
	}
	raw, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m.Interface())
	if err != nil {
		return nil, err
	}
	// protojson varies its spacing on purpose; answers stay compact.
	out := bytes.NewBuffer(buf)
	if err := json.Compact(out, raw); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// appendString writes a JSON string, replacing invalid UTF-8.
func appendString(buf []byte, s string) []byte { return jsonvalue.AppendQuoted(buf, s) }
