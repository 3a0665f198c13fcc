package server

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/world"
)

// toJSON serialises world data for a `raw_json` response field: a raw
// Value (see package jsonvalue), which REST answers splice in as it is and
// the gRPC codec turns into a real Value tree for external callers. World
// data holds only JSON values, so a failure here is a bug and becomes an
// internal error.
func toJSON(v any) (*structpb.Value, error) {
	raw, err := world.EncodeJSON(v)
	if err != nil {
		return nil, fmt.Errorf("serialise world data: %w", err)
	}
	return jsonvalue.Raw(raw), nil
}

// fromStruct converts request data to a world document, whatever its
// form: the raw JSON the REST gateway hands over is decoded directly, a
// gRPC caller's Struct tree is converted; nil stays nil. The world then
// checks the document's shape (depth, refused keys) the same way for both.
// param names the field in the error for data that is not an object.
func fromStruct(param string, s *structpb.Struct) (world.Document, error) {
	m, err := jsonvalue.DecodeObject(s)
	if err != nil {
		return nil, world.Errorf(world.ErrInvalid, "'%s' must be a JSON object", param)
	}
	return m, nil
}
