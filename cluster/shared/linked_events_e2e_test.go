package shared_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestLinkedWorldEventsFollowTheTabletop connects a tabletop to one relay
// node and follows its events there over SSE; the tabletop then moves to
// another node: the stream on the first node keeps receiving its events,
// numbered on without a gap, and a subscriber on the second node resumes
// from the first event with the rest.
func TestLinkedWorldEventsFollowTheTabletop(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 2)
	a := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(0), NodeName: "a"}
	})
	b := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(1), NodeName: "b"}
		cfg.Demo = false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	code := a.Do("POST", "/pairing-codes", a.AdminKey, nil, map[string]any{}).Data(t)["code"].(string)
	onA := linktest.New(linktest.Config{RelayURL: a.Base, WorldID: "w1", ServerFingerprint: "fp1", ReconnectMaxAttempts: 1})
	res, err := onA.Pair(ctx, code)
	if err != nil {
		t.Fatal(err)
	}
	if err := onA.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	stream := openSSE(t, ctx, a, "/actor/subscribe?clientId="+res.ClientID, a.AdminKey)
	if ev, ok := <-stream; !ok || ev.Name != "connected" {
		t.Fatalf("first event: %+v", ev)
	}
	next := func(what string) relaytest.SSEEvent {
		t.Helper()
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatalf("%s: the stream ended", what)
			}
			return ev
		case <-time.After(45 * time.Second):
			t.Fatalf("%s: no event", what)
		}
		return relaytest.SSEEvent{}
	}
	if err := onA.Emit("actor-event", map[string]any{"actorUuid": "Actor.x", "eventType": "update", "changes": map[string]any{"name": "One"}}); err != nil {
		t.Fatal(err)
	}
	first := next("the event from node a")

	// The tabletop moves to node b.
	onA.Disconnect()
	onB := linktest.New(linktest.Config{RelayURL: b.Base, ReconnectMaxAttempts: 1})
	onB.SetCredentials(onA.Credentials())
	if err := onB.Connect(ctx); err != nil {
		t.Fatalf("connect to node b: %v", err)
	}
	if err := onB.Emit("actor-event", map[string]any{"actorUuid": "Actor.x", "eventType": "update", "changes": map[string]any{"name": "Two"}}); err != nil {
		t.Fatal(err)
	}
	moved := next("the event from node b, on node a's stream")
	if moved.ID != first.ID+1 || moved.Name != "actor-update" || !strings.Contains(moved.Data, "Two") {
		t.Fatalf("after the move node a's stream got %d %s %s, want %d actor-update to Two", moved.ID, moved.Name, moved.Data, first.ID+1)
	}

	// Resume on node b from the first event.
	req, _ := http.NewRequestWithContext(ctx, "GET", b.Base+"/actor/subscribe?clientId="+res.ClientID, nil)
	req.Header.Set("x-api-key", a.AdminKey)
	req.Header.Set("Last-Event-ID", itoa(first.ID))
	resumed := relaytest.ReadSSE(t, req)
	if ev := <-resumed; ev.Name != "connected" {
		t.Fatalf("first event on node b: %+v", ev)
	}
	select {
	case ev := <-resumed:
		if ev.ID != moved.ID || ev.Data != moved.Data {
			t.Fatalf("resumed on node b with %d %s, want %d %s", ev.ID, ev.Data, moved.ID, moved.Data)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("nothing replayed on node b")
	}
}
