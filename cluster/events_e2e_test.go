package cluster_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/eventbus"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// streamEvent is one event of a stream, SSE or gRPC alike.
type streamEvent = relaytest.SSEEvent

// compactJSON re-encodes a JSON text so that two encodings of one value
// compare equal.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v: %s", err, s)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// sseStream opens an event stream over REST and delivers its events until
// ctx ends.
func sseStream(t *testing.T, ctx context.Context, r *relaytest.Relay, path, key, lastEventID string) <-chan streamEvent {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	return relaytest.ReadSSE(t, req)
}

// streamFailed names the last value grpcStream delivers when the stream
// ended with an error of its own (not the caller's cancellation), so that
// take can say why it ended.
const streamFailed = "stream-failed"

// grpcStream opens the actor stream over gRPC and delivers its events
// until ctx ends.
func grpcStream(t *testing.T, ctx context.Context, r *relaytest.Relay, key string, req *relayv1.SubscribeActorsRequest) <-chan streamEvent {
	t.Helper()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	stream, err := relayv1.NewEventServiceClient(r.Conn).SubscribeActors(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan streamEvent, 64)
	go func() {
		defer close(out)
		for {
			resp, err := stream.Recv()
			if err != nil {
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					out <- streamEvent{Name: streamFailed, Data: err.Error()}
				}
				return
			}
			ev := resp.GetEvent()
			data, _ := protojson.Marshal(ev.GetData())
			out <- streamEvent{ID: ev.GetSequence(), Name: ev.GetName(), Data: string(data)}
		}
	}()
	return out
}

// take reads n events from a stream, failing after a generous wait.
func take(t *testing.T, what string, stream <-chan streamEvent, n int) []streamEvent {
	t.Helper()
	var out []streamEvent
	timeout := time.After(45 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-stream:
			if !ok {
				t.Fatalf("%s: the stream ended after %d events%s", what, len(out), lastOf(out))
			}
			if ev.Name == streamFailed {
				t.Fatalf("%s: the stream failed after %d events: %s", what, len(out), ev.Data)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("%s: %d events of %d after 45s", what, len(out), n)
		}
	}
	return out
}

// lastOf describes the last of evs for a failure message: an overflow or
// a reset there says why a stream ended early.
func lastOf(evs []streamEvent) string {
	if len(evs) == 0 {
		return ""
	}
	ev := evs[len(evs)-1]
	data := ev.Data
	if len(data) > 300 {
		data = data[:300] + "..."
	}
	return fmt.Sprintf(", the last one %d %s %s", ev.ID, ev.Name, data)
}

// sameEvents fails unless two streams gave the same events: ids, names
// and payloads.
func sameEvents(t *testing.T, what string, got, want []streamEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name || compactJSON(t, got[i].Data) != compactJSON(t, want[i].Data) {
			t.Fatalf("%s: event %d is %d %s %s; the host's stream gave %d %s %s", what, i, got[i].ID, got[i].Name, got[i].Data, want[i].ID, want[i].Name, want[i].Data)
		}
	}
}

// settledConsumers counts the consumers of a world's events by their
// subject until the count is want, for up to thirty seconds, and returns
// the last count: on a loaded machine an ordered consumer that missed its
// heartbeats is replaced, and the old one goes a moment later.
func settledConsumers(t *testing.T, ctx context.Context, r *relaytest.Relay, subject string, want int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := busConsumers(t, ctx, r, subject)
		if n == want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// busConsumers counts the consumers of a world's events on the cluster's
// event stream by their subject.
func busConsumers(t *testing.T, ctx context.Context, r *relaytest.Relay, subject string) int {
	t.Helper()
	stream, err := r.Cluster().JetStream().Stream(ctx, eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	lister := stream.ListConsumers(ctx)
	for info := range lister.Info() {
		subjects := append([]string{info.Config.FilterSubject}, info.Config.FilterSubjects...)
		for _, s := range subjects {
			if s == subject {
				n++
				break
			}
		}
	}
	if err := lister.Err(); err != nil {
		t.Fatal(err)
	}
	return n
}

// steadyLease gives the nodes of a cluster test that is not about lost
// hosts a lease of the relay's default length: on a loaded machine a
// host's renewals can take longer than the tests' short lease allows, and
// its calls would then be refused for a reason the test is not about.
func steadyLease(c *node.Config) { c.Cluster.LeaseTTL = cluster.DefaultLeaseTTL }

// TestEventStreamsOnAnotherNode opens event streams for the world "west"
// (hosted by n2) on n1, which does not host it: n1 serves them itself from
// the cluster's event bus, with one consumer of the world's events
// whatever the number of streams, and every stream, SSE or gRPC, GM or
// player, gives the same events, ids and filtered payloads as the same
// stream on the host. A stream resumed with Last-Event-ID on n1 gets the
// events after it, and an unknown user is refused there as on the host.
func TestEventStreamsOnAnotherNode(t *testing.T) {
	nodes, _ := startCluster(t, steadyLease)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	alice, _ := n2.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ClientIds: []string{"west"}, ScopedUserId: "Alice"})
	const path = "/actor/subscribe?clientId=west"

	// Streams on the host, then on n1: GM and Alice, SSE and gRPC, and
	// a second SSE stream of each, so that n1 has six subscribers.
	hostGM := sseStream(t, ctx, n2, path, n2.AdminKey, "")
	hostAlice := sseStream(t, ctx, n2, path, alice, "")
	edge := map[string]<-chan streamEvent{
		"SSE GM":      sseStream(t, ctx, n1, path, n1.AdminKey, ""),
		"SSE GM 2":    sseStream(t, ctx, n1, path, n1.AdminKey, ""),
		"SSE Alice":   sseStream(t, ctx, n1, path, alice, ""),
		"SSE Alice 2": sseStream(t, ctx, n1, path, alice, ""),
		"gRPC GM":     grpcStream(t, ctx, n1, n1.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: "west"}),
		"gRPC Alice":  grpcStream(t, ctx, n1, alice, &relayv1.SubscribeActorsRequest{ClientId: "west"}),
	}
	for what, s := range map[string]<-chan streamEvent{"host GM": hostGM, "host Alice": hostAlice} {
		edge[what] = s
	}
	for what, s := range edge {
		if ev := take(t, what, s, 1)[0]; ev.Name != "connected" || !strings.Contains(ev.Data, `"west"`) {
			t.Fatalf("%s: first event %s %s, want connected to west", what, ev.Name, ev.Data)
		}
	}
	delete(edge, "host GM")
	delete(edge, "host Alice")
	if n := settledConsumers(t, ctx, n1, "relay.events.west", 1); n != 1 {
		t.Fatalf("%d consumers of west's events with six streams on n1, want 1", n)
	}

	// Three updates through the third node; Alice may not read the
	// goblin, and sees the guard (LIMITED to her) by name only.
	for i, uuid := range []string{relaytest.GoblinUUID, relaytest.GuardUUID, relaytest.AriaUUID} {
		data := map[string]any{"system.attributes.hp.value": 3 + i}
		if uuid == relaytest.GuardUUID {
			data = map[string]any{"name": "Captain"}
		}
		if resp := n3.Do(http.MethodPut, "/update", n3.AdminKey, relaytest.Q("clientId", "west"), map[string]any{"uuid": uuid, "data": data}); resp.Status != http.StatusOK {
			t.Fatalf("update %s: %d %s", uuid, resp.Status, resp.Body)
		}
	}
	wantGM := take(t, "host GM", hostGM, 3)
	wantAlice := take(t, "host Alice", hostAlice, 2)
	if wantAlice[0].ID != wantGM[1].ID || wantAlice[1].ID != wantGM[2].ID {
		t.Fatalf("the host's streams: Alice got ids %d %d, the GM %d %d %d", wantAlice[0].ID, wantAlice[1].ID, wantGM[0].ID, wantGM[1].ID, wantGM[2].ID)
	}
	for what, s := range edge {
		if strings.Contains(what, "Alice") {
			sameEvents(t, what, take(t, what, s, 2), wantAlice)
		} else {
			sameEvents(t, what, take(t, what, s, 3), wantGM)
		}
	}

	t.Run("resume with Last-Event-ID on n1", func(t *testing.T) {
		after := strconv.FormatUint(wantGM[0].ID, 10)
		gm := take(t, "resumed GM", sseStream(t, ctx, n1, path, n1.AdminKey, after), 3)
		sameEvents(t, "resumed GM", gm[1:], wantGM[1:])
		// Alice resumes from before the goblin's event, which she may
		// not read: she gets her two events only.
		before := strconv.FormatUint(wantGM[0].ID-1, 10)
		pl := take(t, "resumed Alice", grpcStream(t, ctx, n1, alice, &relayv1.SubscribeActorsRequest{ClientId: "west", LastEventId: before}), 3)
		sameEvents(t, "resumed Alice", pl[1:], wantAlice)
		if n := settledConsumers(t, ctx, n1, "relay.events.west", 1); n != 1 {
			t.Fatalf("%d consumers of west's events on n1 after the resumes, want 1", n)
		}
	})

	t.Run("stream ticket from the host, stream on n1", func(t *testing.T) {
		got := n2.Do(http.MethodPost, "/stream-tickets", alice, nil, map[string]any{})
		if got.Status != http.StatusOK {
			t.Fatalf("stream ticket: %d %s", got.Status, got.Body)
		}
		ticket := got.Data(t)["ticket"].(string)
		// From before the goblin's event, which Alice may not read.
		before := strconv.FormatUint(wantGM[0].ID-1, 10)
		evs := take(t, "ticket", sseStream(t, ctx, n1, path+"&ticket="+url.QueryEscape(ticket), "", before), 3)
		sameEvents(t, "Alice's stream by ticket", evs[1:], wantAlice)
	})

	t.Run("an unknown user is refused on n1 as on the host", func(t *testing.T) {
		q := relaytest.Q("clientId", "west", "userId", "Nobody")
		host := n2.Do(http.MethodGet, "/actor/subscribe", n2.AdminKey, q, nil)
		got := n1.Do(http.MethodGet, "/actor/subscribe", n1.AdminKey, q, nil)
		if host.Status != http.StatusBadRequest || got.Status != host.Status || got.ErrorText(t) != host.ErrorText(t) {
			t.Fatalf("n1: %d %s; host: %d %s", got.Status, got.Body, host.Status, host.Body)
		}
	})
	t.Run("linked world connected to another node", func(t *testing.T) {
		tt, clientID := connectLinked(t, n1, "fp-events", nil)
		waitUntil(t, "the linked world known on n3", func() bool {
			got := n3.Do(http.MethodGet, "/clients", n3.AdminKey, nil, nil)
			return got.Status == http.StatusOK && strings.Contains(string(got.Body), clientID)
		})
		// n3 lists a paired world as soon as its record reaches it; its
		// streams follow the world once n3 also knows that n1 hosts it.
		waitUntil(t, "n3 knowing that n1 hosts the linked world", func() bool {
			for _, h := range n3.Registry().Snapshot() {
				if h.ClientID == clientID && h.Node == "n1" && h.Live {
					return true
				}
			}
			return false
		})
		// The user is the tabletop's, which n3 learns from the host.
		lpath := "/actor/subscribe?clientId=" + clientID + "&userId=Gamemaster"
		onHost := sseStream(t, ctx, n1, lpath, n1.AdminKey, "")
		onEdge := sseStream(t, ctx, n3, lpath, n3.AdminKey, "")
		onEdge2 := grpcStream(t, ctx, n3, n3.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: clientID, UserId: "Gamemaster"})
		for what, s := range map[string]<-chan streamEvent{"host": onHost, "n3 SSE": onEdge, "n3 gRPC": onEdge2} {
			if ev := take(t, what, s, 1)[0]; ev.Name != "connected" {
				t.Fatalf("%s: first event %s %s", what, ev.Name, ev.Data)
			}
		}
		// Every subscription to a linked world follows it through the
		// bus, on its host too: one consumer on n1, one on n3 for its two
		// streams.
		if n := settledConsumers(t, ctx, n3, "relay.linkevents."+clientID, 2); n != 2 {
			t.Fatalf("%d consumers of the linked world's events, want 2 (n1 and n3)", n)
		}
		if err := tt.Emit("actor-event", map[string]any{"actorUuid": "Actor.hero", "eventType": "update", "changes": map[string]any{"_id": "hero", "name": "Hero"}}); err != nil {
			t.Fatal(err)
		}
		want := take(t, "host", onHost, 1)
		sameEvents(t, "n3 SSE", take(t, "n3 SSE", onEdge, 1), want)
		sameEvents(t, "n3 gRPC", take(t, "n3 gRPC", onEdge2, 1), want)
	})
}
