package client

import (
	"encoding/json"
	"errors"

	"google.golang.org/protobuf/types/known/structpb"
)

// ErrNoData is returned by Decode for an empty field: the relay left it
// out, so there is no JSON to decode.
var ErrNoData = errors.New("client: the field holds no JSON")

// Decode decodes the JSON held in a `raw_json` field of a response (a
// document, a search result, an event's payload, ...) into a value of type
// T: map[string]any, []any or a caller's struct.
//
//	actor, err := client.Decode[map[string]any](resp.GetDocument())
func Decode[T any, B ~[]byte | ~string](raw B) (T, error) {
	var v T
	if len(raw) == 0 {
		return v, ErrNoData
	}
	err := json.Unmarshal([]byte(raw), &v)
	return v, err
}

// DecodeMap decodes the JSON object held in a `raw_json` field.
func DecodeMap[B ~[]byte | ~string](raw B) (map[string]any, error) {
	return Decode[map[string]any](raw)
}

// Data builds the `google.protobuf.Struct` that writes take (an update's or
// a create's `data`) from a map, as JSON would encode it: numbers become
// float64, nested maps and slices become objects and lists. Keys may be
// dotted paths (`system.attributes.hp.value`).
func Data(m map[string]any) (*structpb.Struct, error) {
	return structpb.NewStruct(m)
}
