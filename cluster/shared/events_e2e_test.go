package shared_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// TestRelayEventsReachAnotherNode runs two real relays on a NATS cluster:
// the first hosts the demo world; the second hosts nothing and follows
// the world's events through its event bus. A player's events there are
// the ones the host's own event stream sends the same player, with the
// same ids and the same filtered payloads.
func TestRelayEventsReachAnotherNode(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	host := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(0), NodeName: "host"}
	})
	other := relaytest.Start(t, func(cfg *node.Config) {
		cfg.Shared = &node.SharedState{JetStream: c.JetStream(1), NodeName: "other"}
		cfg.Demo = false
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	aliceKey, _ := host.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ClientIds: []string{"demo"}, ScopedUserId: "Alice"})
	stream := openSSE(t, ctx, host, "/actor/subscribe?clientId=demo", aliceKey)
	if ev, ok := <-stream; !ok || ev.Name != "connected" {
		t.Fatalf("first event on the host: %q", ev.Name)
	}

	w, err := host.Worlds().World(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	users, err := w.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var alice *world.User
	for i := range users {
		if users[i].ID == relaytest.AliceID {
			alice = &users[i]
		}
	}
	sub, err := other.Shared().Events.Subscribe(ctx, "demo", alice, world.EventRequest{Channel: world.ChannelActor})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	for i, uuid := range []string{relaytest.GoblinUUID, relaytest.GuardUUID, relaytest.AriaUUID} {
		data := map[string]any{"system.attributes.hp.value": 3 + i}
		if uuid == relaytest.GuardUUID {
			data = map[string]any{"name": "Captain"} // LIMITED to Alice: her event carries the name only
		}
		if resp := host.Do("PUT", "/update", host.AdminKey, relaytest.Q("clientId", "demo"), map[string]any{"uuid": uuid, "data": data}); resp.Status != http.StatusOK {
			t.Fatalf("update %s: %d %s", uuid, resp.Status, resp.Body)
		}
	}
	// Alice may not read the goblin: two events each.
	for range 2 {
		want, ok := <-stream
		if !ok {
			t.Fatal("the host's stream ended")
		}
		got, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got.Seq != want.ID || got.Name != want.Name || !sameJSON(t, string(got.Data), want.Data) {
			t.Fatalf("the other node gave %d %s %s; the host's stream %d %s %s", got.Seq, got.Name, got.Data, want.ID, want.Name, want.Data)
		}
	}
}

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%v: %s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}

// openSSE opens an event stream on r and delivers its events until ctx
// ends.
func openSSE(t *testing.T, ctx context.Context, r *relaytest.Relay, path, key string) <-chan relaytest.SSEEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, "GET", r.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	return relaytest.ReadSSE(t, req)
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }
