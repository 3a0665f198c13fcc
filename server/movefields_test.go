package server

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

// TestMoveFields checks that a move leaves dst equal to src, whatever the
// fields' kinds (strings, lists, maps, oneofs, messages, a raw JSON
// Struct), sharing the message values, for generated messages and for
// dynamic ones alike, and that dst's old fields are gone.
func TestMoveFields(t *testing.T) {
	raw := jsonvalue.RawStruct([]byte(`{"system.attributes.hp.value":7}`))
	update := &relayv1.UpdateDocumentRequest{ClientId: "demo", UserId: "Alice", Uuid: "Actor.x", Data: raw}
	moved := &relayv1.UpdateDocumentRequest{ClientId: "stale", UserId: "stale"}
	moveFields(moved, update)
	if moved.ClientId != "demo" || moved.UserId != "Alice" || moved.Uuid != "Actor.x" || moved.Data != raw {
		t.Errorf("update request moved as %v", moved)
	}
	if text, ok := jsonvalue.RawJSON(moved.Data); !ok || string(text) != `{"system.attributes.hp.value":7}` {
		t.Errorf("raw data after the move: %q, %v", text, ok)
	}

	structure := &relayv1.GetStructureRequest{Types: []string{"Actor", "Item"}, Path: "Folder.x", Recursive: true}
	key := &relayv1.CreateKeyRequest{Name: "k", Scopes: []string{"all"}, ClientUsers: map[string]string{"demo": "Alice"}}
	value := structpb.NewStringValue("text")
	list, _ := structpb.NewValue([]any{1.0, "two", map[string]any{"three": true}})
	for _, src := range []proto.Message{structure, key, value, list, &relayv1.GetDocumentRequest{}} {
		dst := src.ProtoReflect().New().Interface()
		moveFields(dst, src)
		if !proto.Equal(dst, src) {
			t.Errorf("%T moved as %v, want %v", src, dst, src)
		}
	}

	// A dynamic message of the same type is moved through protoreflect.
	desc := update.ProtoReflect().Descriptor()
	dyn := dynamicpb.NewMessage(desc)
	dyn.Set(desc.Fields().ByName("uuid"), protoreflect.ValueOfString("Actor.y"))
	into := dynamicpb.NewMessage(desc)
	into.Set(desc.Fields().ByName("user_id"), protoreflect.ValueOfString("stale"))
	moveFields(into, dyn)
	if !proto.Equal(into, dyn) {
		t.Errorf("dynamic message moved as %v, want %v", into, dyn)
	}
}

// TestMoveFieldsAllocatesNothing: moving a generated message, as every
// local call does with its request and its response, allocates nothing.
func TestMoveFieldsAllocatesNothing(t *testing.T) {
	src := &relayv1.GetDocumentRequest{ClientId: "demo", UserId: "Alice", Uuid: "Actor.ariaVale00000001"}
	dst := new(relayv1.GetDocumentRequest)
	if n := testing.AllocsPerRun(100, func() { moveFields(dst, src) }); n != 0 {
		t.Errorf("%v allocations per move, want none", n)
	}
	if dst.Uuid != src.Uuid {
		t.Errorf("moved as %v", dst)
	}
}
