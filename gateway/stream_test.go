package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
)

func TestSSEFrames(t *testing.T) {
	t.Parallel()
	data := []byte(`{"changes": {"name": "B\nC"},
		"uuid": "Actor.a"}`)
	var frames []byte
	for _, msg := range []proto.Message{
		&relayv1.SubscribeActorsResponse{Event: &relayv1.Event{Sequence: 42, Name: "actor-update", Data: jsonvalue.Raw(data)}},
		&relayv1.SubscribeActorsResponse{Event: &relayv1.Event{Sequence: 43, Name: "tree", Data: structpb.NewStringValue("x")}},
		&relayv1.SubscribeActorsResponse{Event: &relayv1.Event{Name: "connected"}},
	} {
		var err error
		if frames, err = appendMessageFrame(frames, msg); err != nil {
			t.Fatal(err)
		}
	}
	want := "id: 42\nevent: actor-update\ndata: {\"changes\":{\"name\":\"B\\nC\"},\"uuid\":\"Actor.a\"}\n\n" +
		"id: 43\nevent: tree\ndata: \"x\"\n\n" +
		"event: connected\ndata: {}\n\n"
	if got := string(frames); got != want {
		t.Fatalf("frames:\n got %q\nwant %q", got, want)
	}
}

func TestKeepaliveOnlyWhenQuiet(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	sw := &sseWriter{w: rec, rc: http.NewResponseController(rec)}
	stop := sw.keepalive(20 * time.Millisecond)
	time.Sleep(110 * time.Millisecond)
	stop()
	sw.mu.Lock()
	n := strings.Count(rec.Body.String(), ": keepalive\n\n")
	sw.mu.Unlock()
	if n < 2 {
		t.Fatalf("got %d keepalives in 110ms at 20ms intervals", n)
	}
}
