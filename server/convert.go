package server

import (
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/world"
)

// toJSON serialises world data for a `raw_json` response field. World data
// holds only JSON values, so a failure here is a bug and becomes an internal
// error.
func toJSON(v any) ([]byte, error) {
	raw, err := world.EncodeJSON(v)
	if err != nil {
		return nil, fmt.Errorf("serialise world data: %w", err)
	}
	return raw, nil
}

// fromStruct converts request data to a world document; nil stays nil.
func fromStruct(s *structpb.Struct) world.Document {
	if s == nil {
		return nil
	}
	return s.AsMap()
}
