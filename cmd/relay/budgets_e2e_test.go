package main

import (
	"context"
	"encoding/json"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// The flood tests below measure the heap of this process, which hosts the
// relay: they do not call t.Parallel, so that they run while no other
// test of the package does, and their subscribers discard what they read.

// floodRingBytes is the event ring's byte budget of the flood tests, and
// floodHeapBound what the relay's heap may grow by while one world is
// flooded: the ring (up to a few times its budget while a burst is handed
// out), the replies and documents in flight, and the runtime's own slack.
// Without the budget each test's flood leaves well over 100 MiB held.
const (
	floodRingBytes = 4 << 20
	floodHeapBound = 40 << 20
)

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// discardStream opens an event stream and reads it into nothing; it
// returns how many bytes were read so far.
func (tr *testRelay) discardStream(path string, query map[string]string) *atomic.Int64 {
	tr.t.Helper()
	q := relaytest.Q()
	for k, v := range query {
		q.Set(k, v)
	}
	resp, cancel := tr.startStream(path, tr.AdminKey, q, nil)
	if resp.StatusCode != http.StatusOK {
		cancel()
		tr.t.Fatalf("GET %s: %d", path, resp.StatusCode)
	}
	tr.t.Cleanup(cancel)
	var n atomic.Int64
	go func() {
		buf := make([]byte, 64<<10)
		for {
			k, err := resp.Body.Read(buf)
			n.Add(int64(k))
			if err != nil {
				return
			}
		}
	}()
	return &n
}

// answersQuickly checks that another world answers a read within a few
// seconds while the flood goes on.
func (tr *testRelay) answersQuickly(clientID, uuid string) {
	tr.t.Helper()
	start := time.Now()
	r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", uuid), nil)
	if r.Status != http.StatusOK {
		tr.t.Fatalf("another world's read during the flood: %d %s", r.Status, r.Body)
	}
	if d := time.Since(start); d > 5*time.Second {
		tr.t.Fatalf("another world's read took %v during the flood", d)
	}
}

// TestEmbeddedWorldFloodStaysWithinBudget: a key with entity:write sends
// many updates of about 900 KB to an embedded world while a stream
// follows it; the relay's heap stays within the bound (the events kept for
// resuming stay within --event-ring-bytes) and another world answers
// meanwhile.
func TestEmbeddedWorldFloodStaysWithinBudget(t *testing.T) {
	tr := startTestRelay(t, func(c *node.Config) {
		c.MaxBodyBytes = 2 << 20
		c.EventRingBytes = floodRingBytes
	})
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	const other = "budget-other"
	if _, err := tr.Worlds().Create(context.Background(), other, seed); err != nil {
		t.Fatal(err)
	}
	read := tr.discardStream("/hooks/subscribe", map[string]string{"clientId": demo.ClientID})
	before := liveHeap()
	const updates = 60
	for i := range updates {
		bio := strings.Repeat(string(rune('a'+i%26)), 900<<10)
		r := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("clientId", demo.ClientID),
			map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"system.details.biography.value": bio}})
		if r.Status != http.StatusOK {
			t.Fatalf("update %d: %d %.300s", i, r.Status, r.Body)
		}
		if i%10 == 9 {
			tr.answersQuickly(other, relaytest.AriaUUID)
		}
	}
	waitFor(t, "the stream to receive events", func() bool { return read.Load() > 900<<10 })
	after := liveHeap()
	grew := int64(after) - int64(before)
	t.Logf("heap %d MiB before, %d MiB after %d updates of 900 KB (grew %d MiB)", before>>20, after>>20, updates, grew>>20)
	if grew > floodHeapBound {
		t.Fatalf("the heap grew by %d MiB over %d updates of 900 KB, more than %d MiB", grew>>20, updates, floodHeapBound>>20)
	}
	// A resume from before the flood is told to reset rather than replay
	// it all.
	resumed := tr.openStream("/hooks/subscribe", tr.AdminKey, relaytest.Q("clientId", demo.ClientID), http.Header{"Last-Event-Id": {"1"}})
	if d := resumed.expect("connected", "reset")[1].json(t); d["lastEventId"] != "1" {
		t.Fatalf("reset %v", d)
	}
}

// TestLinkedWorldFloodStaysWithinBudget: a linked tabletop sends many
// large hook events, some over --link-max-event-bytes, while a stream
// follows the world; the oversized ones are dropped and counted, the
// relay's heap stays within the bound, and another world answers
// meanwhile.
func TestLinkedWorldFloodStaysWithinBudget(t *testing.T) {
	tr := startTestRelay(t, func(c *node.Config) {
		c.EventRingBytes = floodRingBytes
		c.LinkMaxEventBytes = 2 << 20
		c.MetricsListen = "127.0.0.1:0"
	})
	tt := tr.linkedTabletop()
	clientID, _ := tt.Credentials()
	read := tr.discardStream("/hooks/subscribe", map[string]string{"clientId": clientID})
	waitFor(t, "the module's hooks channel", func() bool { return tt.Channels()["hooks"] })
	hook := func(i, size int) map[string]any {
		id := "flood" + strings.Repeat("0", 10) + string(rune('a'+i%26))
		return map[string]any{"hook": "updateActor", "args": []any{
			map[string]any{"_id": id, "name": "Flood", "ownership": map[string]any{"default": 2}},
			map[string]any{"_id": id, "system": map[string]any{"bio": strings.Repeat(string(rune('a'+i%26)), size)}}, map[string]any{}}}
	}
	before := liveHeap()
	const events, oversized = 80, 5
	for i := range events {
		if err := tt.Emit("hook-event", hook(i, 1<<20)); err != nil {
			t.Fatal(err)
		}
		if i%16 == 15 {
			if err := tt.Emit("hook-event", hook(i, 3<<20)); err != nil {
				t.Fatal(err)
			}
			tr.answersQuickly(demo.ClientID, relaytest.AriaUUID)
		}
	}
	waitFor(t, "the oversized events to be counted", func() bool {
		return scrape(t, tr.MetricsAddr())["relay_linked_events_oversized_total"] == oversized
	})
	waitFor(t, "the stream to receive events", func() bool { return read.Load() > 1<<20 })
	after := liveHeap()
	grew := int64(after) - int64(before)
	t.Logf("heap %d MiB before, %d MiB after %d events of 1 MiB (grew %d MiB)", before>>20, after>>20, events, grew>>20)
	if grew > floodHeapBound {
		t.Fatalf("the heap grew by %d MiB over %d events of 1 MiB, more than %d MiB", grew>>20, events, floodHeapBound>>20)
	}
	if !tt.Connected() {
		t.Fatal("the tabletop was disconnected")
	}
}

// TestLinkedRepliesOverTheLimits: a linked world's reply larger than
// --link-max-reply-bytes, or nested deeper than --max-json-depth allows,
// fails its call over REST (503) and gRPC (UNAVAILABLE) with a message
// that says why, and the world stays connected and answers the next call.
func TestLinkedRepliesOverTheLimits(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.LinkMaxReplyBytes = 256 << 10 })
	tt := tr.linkedTabletop(func(c *linktest.Config) {
		c.Handler = linktest.ByType(map[string]linktest.Handler{
			"entity": func(_ context.Context, req linktest.Request) (any, bool) {
				var p struct {
					UUID string `json:"uuid"`
				}
				_ = req.Params(&p)
				switch p.UUID {
				case "Actor.big":
					return map[string]any{"uuid": p.UUID, "data": map[string]any{"_id": "big", "name": "Big", "bio": strings.Repeat("x", 300<<10)}}, true
				case "Actor.deep":
					deep := strings.Repeat(`{"a":`, 9990) + `1` + strings.Repeat(`}`, 9990)
					return map[string]any{"uuid": p.UUID, "data": map[string]any{"_id": "deep", "name": "Deep", "system": json.RawMessage(deep)}}, true
				}
				return map[string]any{"uuid": p.UUID, "data": map[string]any{"_id": "hero", "name": "Hero"}}, true
			},
		})
	})
	clientID, _ := tt.Credentials()
	conn, ctx := tr.grpcClient(t)
	docs := relayv1.NewDocumentServiceClient(conn)
	for _, c := range []struct{ uuid, why string }{{"Actor.big", "more than the limit of 262144"}, {"Actor.deep", "nested deeper than the limit"}} {
		r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", c.uuid), nil)
		if r.Status != http.StatusServiceUnavailable || !strings.Contains(r.ErrorText(t), c.why) {
			t.Fatalf("REST GET %s: %d %.300s, want 503 saying %q", c.uuid, r.Status, r.Body, c.why)
		}
		_, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: clientID, Uuid: c.uuid})
		if st, _ := status.FromError(err); st.Code() != codes.Unavailable || !strings.Contains(st.Message(), c.why) {
			t.Fatalf("gRPC GetDocument %s: %v, want UNAVAILABLE saying %q", c.uuid, err, c.why)
		}
	}
	if r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.hero"), nil); r.Status != http.StatusOK || r.Data(t)["name"] != "Hero" {
		t.Fatalf("the next call: %d %.300s", r.Status, r.Body)
	}
	if !tt.Connected() {
		t.Fatal("a refused reply disconnected the world")
	}
}
