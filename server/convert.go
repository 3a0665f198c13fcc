package server

import (
	"bytes"
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	"relay/world"
)

// toJSON serialises world data for a `raw_json` response field. World data
// holds only JSON values, so a failure here is a bug and becomes an internal
// error. HTML characters are kept as they are: the output is data, not markup.
func toJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("serialise world data: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// fromStruct converts request data to a world document; nil stays nil.
func fromStruct(s *structpb.Struct) world.Document {
	if s == nil {
		return nil
	}
	return s.AsMap()
}
