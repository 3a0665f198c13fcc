package server_test

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/jsonvalue"
)

// valueJSON is the JSON text of a Value: a raw one's text, or a tree's in
// encoding/json's stable form (protojson varies its spacing).
func valueJSON(t *testing.T, v *structpb.Value) []byte {
	t.Helper()
	if raw, ok := jsonvalue.RawJSON(v); ok {
		return raw
	}
	raw, err := json.Marshal(v.AsInterface())
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return raw
}
