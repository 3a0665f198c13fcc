// Package jsonvalue carries JSON text in the contract's JSON-typed fields
// (google.protobuf.Value, and Struct for request data) without building a
// tree of messages for it.
//
// The contract types documents, results and event payloads as
// google.protobuf.Value so that gRPC tools and generated clients show and
// use them as JSON. The relay itself holds these values already
// serialised (the world keeps every document as JSON text), and its REST
// answers splice that text in as it is: converting it to a Value tree and
// back for every REST read would cost more than the read itself. So a
// value the relay produces travels inside the process as a raw Value: a
// Value whose string_value holds the JSON text, shared with the world and
// not copied, marked as raw JSON by a private unknown field. The REST
// encoder (package gateway) splices the text in; the gRPC server's codec
// transcodes it, straight from the JSON text, into the protobuf encoding
// of the Value tree it stands for (see Externalize), so that a gRPC caller
// receives a real Value and never sees the marker.
//
// Requests go the other way: the REST gateway hands the JSON of a Struct
// parameter (an update's data) to the service as a raw Struct, the JSON
// text in the private field, and the service reads it with [StructJSON] or
// [DecodeObject], whichever form the value has: a raw one from REST or a
// real tree from a gRPC caller.
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"unsafe"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// markerField is the private field number under which the marker (and, in
// a raw Struct, the JSON text) is kept among a message's unknown fields:
// one below protobuf's highest field number, which the gRPC server's codec
// uses for its own marker (server/decode.go). No message of
// google.protobuf uses either.
const markerField protowire.Number = protowire.MaxValidNumber - 1

// valueMarker is the unknown field of a raw Value: the marker field, as a
// varint holding 1. Its capacity is its length, so that anything appending
// to a message's unknown fields (proto.Merge) makes a copy of its own.
var valueMarker = func() []byte {
	b := protowire.AppendVarint(protowire.AppendTag(nil, markerField, protowire.VarintType), 1)
	return b[:len(b):len(b)]
}()

// Raw returns a Value standing for the JSON text raw, without parsing or
// copying it: raw must be one valid JSON value and must not change
// afterwards (the relay's JSON text is immutable once made). Empty text is
// no value at all: Raw returns nil, which REST shows as null and a gRPC
// caller as an unset field.
func Raw(raw []byte) *structpb.Value {
	if len(raw) == 0 {
		return nil
	}
	// The Value and its oneof wrapper in one allocation: every REST read
	// makes one.
	r := &rawValue{kind: structpb.Value_StringValue{StringValue: unsafe.String(&raw[0], len(raw))}}
	r.value.Kind = &r.kind
	r.value.ProtoReflect().SetUnknown(valueMarker)
	return &r.value
}

// rawValue holds a raw Value and its kind together.
type rawValue struct {
	value structpb.Value
	kind  structpb.Value_StringValue
}

// RawJSON returns the JSON text of a raw Value or raw Struct and true, or
// nil and false for any other message (a real Value tree included). The
// text must not be changed.
func RawJSON(m proto.Message) ([]byte, bool) {
	switch x := m.(type) {
	case *structpb.Value:
		if x == nil {
			return nil, false
		}
		s, ok := x.GetKind().(*structpb.Value_StringValue)
		if !ok || !bytes.Equal(x.ProtoReflect().GetUnknown(), valueMarker) || s.StringValue == "" {
			return nil, false
		}
		return unsafe.Slice(unsafe.StringData(s.StringValue), len(s.StringValue)), true
	case *structpb.Struct:
		if x == nil {
			return nil, false
		}
		return rawField(x.ProtoReflect().GetUnknown())
	case nil:
		return nil, false
	}
	// A message of another Go type with the same descriptor (dynamicpb).
	r := m.ProtoReflect()
	if !r.IsValid() {
		return nil, false
	}
	switch r.Descriptor().FullName() {
	case valueName:
		fd := r.Descriptor().Fields().ByName("string_value")
		if !r.Has(fd) || !bytes.Equal(r.GetUnknown(), valueMarker) || r.Get(fd).String() == "" {
			return nil, false
		}
		s := r.Get(fd).String()
		return unsafe.Slice(unsafe.StringData(s), len(s)), true
	case structName:
		return rawField(r.GetUnknown())
	}
	return nil, false
}

// structName is the full name of google.protobuf.Struct.
const structName = "google.protobuf.Struct"

// rawField reads unknown fields that are exactly one marker field holding
// bytes.
func rawField(unknown []byte) ([]byte, bool) {
	if len(unknown) == 0 {
		return nil, false
	}
	num, typ, n := protowire.ConsumeTag(unknown)
	if n < 0 || num != markerField || typ != protowire.BytesType {
		return nil, false
	}
	raw, m := protowire.ConsumeBytes(unknown[n:])
	if m < 0 || n+m != len(unknown) {
		return nil, false
	}
	return raw, true
}

// RawStruct returns a Struct standing for the JSON object text raw, which
// it copies. raw must be a valid JSON object: the REST gateway checks the
// request body before it hands a parameter on.
func RawStruct(raw []byte) *structpb.Struct {
	s := &structpb.Struct{}
	field := protowire.AppendTag(make([]byte, 0, len(raw)+16), markerField, protowire.BytesType)
	s.ProtoReflect().SetUnknown(protowire.AppendBytes(field, raw))
	return s
}

// JSON returns the JSON text of a Value whatever its form: the text of a
// raw Value as it is (not to be changed), a real tree encoded by
// AppendJSON. A nil Value is null.
func JSON(v *structpb.Value) ([]byte, error) {
	if v == nil {
		return []byte("null"), nil
	}
	if raw, ok := RawJSON(v); ok {
		return raw, nil
	}
	return AppendJSON(nil, v)
}

// StructJSON returns the JSON text of a Struct whatever its form, and
// false for a nil Struct.
func StructJSON(s *structpb.Struct) ([]byte, bool, error) {
	if s == nil {
		return nil, false, nil
	}
	if raw, ok := RawJSON(s); ok {
		return raw, true, nil
	}
	raw, err := protojson.Marshal(s)
	return raw, true, err
}

// ErrNotObject is returned by DecodeObject for JSON text that is not an
// object.
var ErrNotObject = errors.New("not a JSON object")

// DecodeObject returns the members of a Struct whatever its form, as plain
// Go values (map[string]any, []any, float64, string, bool, nil): a raw
// Struct's JSON is decoded directly, without a Struct tree in between; a
// real tree is converted as structpb's AsMap does. A nil Struct is nil.
func DecodeObject(s *structpb.Struct) (map[string]any, error) {
	if s == nil {
		return nil, nil
	}
	raw, ok := RawJSON(s)
	if !ok {
		return s.AsMap(), nil
	}
	if m, ok := decodePlain(raw); ok {
		return m, nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, ErrNotObject
	}
	return m, nil
}
