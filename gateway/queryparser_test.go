package gateway

import (
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	relayv1 "relay/gen/go/relay/v1"
)

// TestQueryParserMatchesProtojson decodes parameters field by field, as
// body-less routes do, and checks each outcome against protojson decoding
// the whole object: the same message, or an error from both.
func TestQueryParserMatchesProtojson(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  func() proto.Message
		obj  map[string]json.RawMessage
	}{
		{"plain strings and an int", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"query": json.RawMessage(`"Aria"`), "limit": json.RawMessage(`5`)}},
		{"escaped and unicode strings", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"query": json.RawMessage(`"a\"b\\c\u0000\n"`), "filter": json.RawMessage(`"é✓😀"`)}},
		{"escapes without quotes", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"query": json.RawMessage(`"a\\b\u00e9\t"`)}},
		{"int forms protojson knows", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`1e2`)}},
		{"int with a fraction", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`2.5`)}},
		{"int out of range", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`2147483648`)}},
		{"int as a string", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`"7"`)}},
		{"negative zero and minus", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`-0`)}},
		{"leading zero", func() proto.Message { return &relayv1.SearchDocumentsRequest{} },
			map[string]json.RawMessage{"limit": json.RawMessage(`007`)}},
		{"bools and an optional double", func() proto.Message { return &relayv1.ShortRestRequest{} },
			map[string]json.RawMessage{"autoHD": json.RawMessage(`true`), "selected": json.RawMessage(`false`), "autoHDThreshold": json.RawMessage(`0.5`)}},
		{"double in exponent form", func() proto.Message { return &relayv1.ShortRestRequest{} },
			map[string]json.RawMessage{"autoHDThreshold": json.RawMessage(`1e-3`)}},
		{"a string where a bool goes", func() proto.Message { return &relayv1.ShortRestRequest{} },
			map[string]json.RawMessage{"autoHD": json.RawMessage(`"true"`)}},
		{"a list", func() proto.Message { return &relayv1.GetActorDetailsRequest{} },
			map[string]json.RawMessage{"details": json.RawMessage(`["items","spells"]`)}},
		{"free-form data", func() proto.Message { return &relayv1.UpdateDocumentRequest{} },
			map[string]json.RawMessage{"uuid": json.RawMessage(`"Actor.a"`), "data": json.RawMessage(`{"a":{"b":[1,{"c":null}]},"n":1e400}`)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole, byField := tc.msg(), tc.msg()
			wholeErr := protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(appendObject(nil, tc.obj), whole)
			fieldErr := queryParser{}.Parse(byField, formFields(tc.obj), nil)
			switch {
			case (wholeErr == nil) != (fieldErr == nil):
				t.Fatalf("protojson says %v, field by field %v", wholeErr, fieldErr)
			case wholeErr == nil && !proto.Equal(whole, byField):
				t.Fatalf("protojson gives %v, field by field %v", whole, byField)
			}
		})
	}
	// A value already set (a path variable) wins over the parameters.
	req := &relayv1.SearchDocumentsRequest{Query: "from the path"}
	if err := (queryParser{}).Parse(req, formFields(map[string]json.RawMessage{"query": json.RawMessage(`"from the query"`), "limit": json.RawMessage(`3`)}), nil); err != nil {
		t.Fatal(err)
	}
	if req.GetQuery() != "from the path" || req.GetLimit() != 3 {
		t.Errorf("got %v; the path's query must win and the limit be read", req)
	}
}
