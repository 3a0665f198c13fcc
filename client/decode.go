package client

import (
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/jsonvalue"
)

// ErrNoData is returned by Decode for an unset field: the relay left it
// out, so there is no value to decode.
var ErrNoData = errors.New("client: the field holds no value")

// Decode decodes the JSON value held in a `raw_json` field of a response
// (a document, a search result, an event's payload, ...; a
// google.protobuf.Value) into a value of type T: map[string]any, []any or
// a caller's struct, as encoding/json would decode the value's JSON.
//
//	actor, err := client.Decode[map[string]any](resp.GetDocument())
func Decode[T any](v *structpb.Value) (T, error) {
	var out T
	if v == nil {
		return out, ErrNoData
	}
	// The tree's JSON, written by jsonvalue (several times faster than
	// protojson), read by encoding/json.
	raw, err := jsonvalue.AppendJSON(nil, v)
	if err != nil {
		return out, err
	}
	err = json.Unmarshal(raw, &out)
	return out, err
}

// DecodeMap returns the JSON object held in a `raw_json` field as a map,
// converted directly from the Value tree.
func DecodeMap(v *structpb.Value) (map[string]any, error) {
	if v == nil {
		return nil, ErrNoData
	}
	s, ok := v.GetKind().(*structpb.Value_StructValue)
	if !ok {
		return nil, errors.New("client: the field holds no JSON object")
	}
	return s.StructValue.AsMap(), nil
}

// Data builds the `google.protobuf.Struct` that writes take (an update's or
// a create's `data`) from a map, as JSON would encode it: numbers become
// float64, nested maps and slices become objects and lists. Keys may be
// dotted paths (`system.attributes.hp.value`).
func Data(m map[string]any) (*structpb.Struct, error) {
	return structpb.NewStruct(m)
}
