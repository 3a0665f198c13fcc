package server

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// TestCodecSendsValueTrees: the codec encodes a response's raw Values as
// the Value trees their JSON stands for, leaves the message as it was
// (the services may hand one message to several streams), and repairs a
// text that is not UTF-8 (a linked tabletop's) instead of failing.
func TestCodecSendsValueTrees(t *testing.T) {
	codec := newServerCodec()
	for _, tc := range []struct {
		name, text string
		want       *structpb.Value
	}{
		{"an object", `{"name":"Aria","hp":[12,null,true]}`, mustValue(t, map[string]any{"name": "Aria", "hp": []any{12, nil, true}})},
		{"broken UTF-8", "{\"name\":\"A\xffria\"}", mustValue(t, map[string]any{"name": "A\uFFFDria"})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &relayv1.UpdateDocumentResponse{Uuid: "Actor.a", Document: jsonvalue.Raw([]byte(tc.text))}
			out, err := codec.Marshal(resp)
			if err != nil {
				t.Fatal(err)
			}
			var got relayv1.UpdateDocumentResponse
			if err := proto.Unmarshal(out.Materialize(), &got); err != nil {
				t.Fatal(err)
			}
			out.Free()
			if got.GetUuid() != "Actor.a" || !proto.Equal(got.GetDocument(), tc.want) {
				t.Fatalf("got %v, want %v", &got, tc.want)
			}
			if raw, ok := jsonvalue.RawJSON(resp.GetDocument()); !ok || string(raw) != tc.text {
				t.Fatal("the codec changed the message it encoded")
			}
		})
	}
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	out, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
