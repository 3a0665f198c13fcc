package gateway

import (
	"net/http/httptest"
	"strings"
	"sync"
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

// lockedRecorder is a response recorder whose body may be read while the
// stream's timer writes to it.
type lockedRecorder struct {
	mu sync.Mutex
	*httptest.ResponseRecorder
}

func (r *lockedRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ResponseRecorder.Write(p)
}

// TestKeepaliveOnlyWhenQuiet: a quiet stream gets a keepalive comment
// every interval, and none once stopped.
func TestKeepaliveOnlyWhenQuiet(t *testing.T) {
	t.Parallel()
	rec := &lockedRecorder{ResponseRecorder: httptest.NewRecorder()}
	sw := newSSEWriter(rec)
	count := func() int {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return strings.Count(rec.Body.String(), ": keepalive\n\n")
	}
	stop := sw.keepalive(20 * time.Millisecond)
	// A loaded machine may run the timer late: wait for two keepalives
	// rather than for a fixed time.
	deadline := time.Now().Add(30 * time.Second)
	for count() < 2 {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("got %d keepalives in 30s at 20ms intervals", count())
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	n := count()
	time.Sleep(60 * time.Millisecond)
	if after := count(); after != n {
		t.Fatalf("%d keepalives after stop, %d before", after, n)
	}
}
