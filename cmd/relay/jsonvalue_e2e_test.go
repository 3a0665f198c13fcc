package main

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"
)

// valueJSON is the JSON text of a Value tree a gRPC caller received, in
// encoding/json's stable form (protojson varies its spacing), so that
// tests can look into it.
func valueJSON(t *testing.T, v *structpb.Value) []byte {
	t.Helper()
	if v == nil {
		return []byte("null")
	}
	raw, err := json.Marshal(v.AsInterface())
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return raw
}
