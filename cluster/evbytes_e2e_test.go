package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/eventbus"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// evRingBytes is --event-ring-bytes in TestEventStreamByteBudget: small,
// so that a few dozen large events pass it.
const evRingBytes = 1 << 20

// streamState returns the events stream's stored bytes and how many
// events it keeps of subject.
func streamState(t *testing.T, ctx context.Context, r *relaytest.Relay, subject string) (bytes uint64, kept uint64) {
	t.Helper()
	stream, err := r.Cluster().JetStream().Stream(ctx, eventbus.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Bytes, info.State.Subjects[subject]
}

// settledGrowth waits until the events stream's bytes stop changing and
// are within bound of before, and returns their growth (the last one seen
// when it never settles within the bound).
func settledGrowth(t *testing.T, ctx context.Context, r *relaytest.Relay, subject string, before uint64, bound int64) int64 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last int64 = -1
	for {
		now, _ := streamState(t, ctx, r, subject)
		growth := int64(now) - int64(before)
		if growth == last && growth <= bound || time.Now().After(deadline) {
			return growth
		}
		last = growth
		time.Sleep(200 * time.Millisecond)
	}
}

// increasing fails unless evs are events (no reset or overflow) with
// increasing ids.
func increasing(t *testing.T, what string, evs []streamEvent) {
	t.Helper()
	for i, ev := range evs {
		if ev.Name == "reset" || ev.Name == "overflow" || i > 0 && ev.ID <= evs[i-1].ID {
			t.Fatalf("%s: event %d is %s with id %d after id %d", what, i, ev.Name, ev.ID, evs[max(i-1, 0)].ID)
		}
	}
}

// pacedWindow is how many large events paced lets a reader lag: their
// bytes stay well below evRingBytes.
const pacedWindow = 4

// paced runs step n times, each step making one event of stream, and
// returns the stream's n events. A step waits until the reader has
// received all but pacedWindow of the earlier steps' events: a reader
// that falls a world's whole byte budget behind is overflowed by design,
// and on a loaded machine a reader can be that slow for a moment. The
// stream still takes more events than its budget keeps.
func paced(t *testing.T, what string, stream <-chan streamEvent, n int, step func(i int)) []streamEvent {
	t.Helper()
	var evs []streamEvent
	for i := range n {
		if lag := i - len(evs); lag >= pacedWindow {
			evs = append(evs, take(t, what, stream, lag-pacedWindow+1)...)
		}
		step(i)
	}
	return append(evs, take(t, what, stream, n-len(evs))...)
}

// TestEventStreamByteBudget floods an embedded world (west, hosted by n2)
// with large updates, and then a linked world with large events from its
// tabletop, on a cluster whose worlds keep 1 MiB of events: in the
// cluster's events stream each world grows up to that budget and no
// further, subscribers on other nodes still get every event, a resume
// from before the world's kept events gets the reset, and the history of
// another world (demo, on n3) stays whole: a resume with Last-Event-ID
// from its first event gets every later one.
func TestEventStreamByteBudget(t *testing.T) {
	// Large updates through another node take a while on a loaded
	// machine: the forwards and the test's calls wait long enough, since
	// the test is not about time-outs.
	nodes, _ := startCluster(t, steadyLease, func(c *node.Config) {
		c.EventRingBytes = evRingBytes
		c.MaxBodyBytes = 1 << 20
		c.Cluster.ForwardTimeout = 30 * time.Second
	})
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	for _, n := range nodes {
		n.Client = &http.Client{Timeout: time.Minute}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// World B's history: a few small updates of demo.
	const demoPath = "/actor/subscribe?clientId=demo"
	demoLive := sseStream(t, ctx, n1, demoPath, n1.AdminKey, "")
	take(t, "demo", demoLive, 1)
	const demoUpdates = 5
	for i := range demoUpdates {
		if resp := n1.Do(http.MethodPut, "/update", n1.AdminKey, relaytest.Q("clientId", "demo"), map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"system.attributes.hp.value": 10 + i}}); resp.Status != http.StatusOK {
			t.Fatalf("update demo: %d %s", resp.Status, resp.Body)
		}
	}
	demoEvents := take(t, "demo", demoLive, demoUpdates)
	increasing(t, "demo", demoEvents)
	// Every channel's events of the updates are stored when the count
	// stays the same a moment.
	_, demoKept := streamState(t, ctx, n1, "relay.events.demo")
	for settled := 0; settled < 3; {
		time.Sleep(100 * time.Millisecond)
		_, now := streamState(t, ctx, n1, "relay.events.demo")
		if now == demoKept {
			settled++
		} else {
			demoKept, settled = now, 0
		}
	}

	// Large updates of west through n3 while n1 follows it.
	const westPath = "/actor/subscribe?clientId=west"
	westLive := sseStream(t, ctx, n1, westPath, n1.AdminKey, "")
	take(t, "west", westLive, 1)
	before, _ := streamState(t, ctx, n1, "relay.events.west")
	const large = 100_000
	const updates = 24 // about 4.8 MB of events in west, 2.4 MB in the linked world
	westEvents := paced(t, "west on n1", westLive, updates, func(i int) {
		bio := strings.Repeat(fmt.Sprintf("%07d", i), large/7)
		if resp := n3.Do(http.MethodPut, "/update", n3.AdminKey, relaytest.Q("clientId", "west"), map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"system.details.biography": bio}}); resp.Status != http.StatusOK {
			t.Fatalf("update west %d: %d %s", i, resp.Status, resp.Body)
		}
	})
	increasing(t, "west on n1", westEvents)
	growth := settledGrowth(t, ctx, n1, "relay.events.west", before, evRingBytes)
	_, westKept := streamState(t, ctx, n1, "relay.events.west")
	t.Logf("west: %d events of about %d KB published, %d kept, the stream grew %d bytes (budget %d)", updates, large/1000, westKept, growth, evRingBytes)
	if growth > evRingBytes || growth < evRingBytes/2 {
		t.Fatalf("the events stream grew %d bytes for west's events, want between half the budget and the budget %d", growth, evRingBytes)
	}
	if westKept == 0 || westKept >= updates {
		t.Fatalf("the events stream keeps %d of west's %d events", westKept, updates)
	}

	t.Run("a resume from before west's kept events gets the reset", func(t *testing.T) {
		// n3 has not followed west: its feed reads what the stream keeps.
		after := strconv.FormatUint(westEvents[0].ID, 10)
		evs := take(t, "west resumed on n3", sseStream(t, ctx, n3, westPath, n3.AdminKey, after), 2)
		if evs[1].Name != "reset" {
			t.Fatalf("resume from %s on n3: %s %s, want the reset", after, evs[1].Name, evs[1].Data)
		}
	})

	demoWhole := func(t *testing.T, on *relaytest.Relay) {
		t.Helper()
		if _, kept := streamState(t, ctx, n1, "relay.events.demo"); kept != demoKept {
			t.Fatalf("the events stream keeps %d of demo's events, %d before", kept, demoKept)
		}
		after := strconv.FormatUint(demoEvents[0].ID-1, 10)
		evs := take(t, "demo resumed", sseStream(t, ctx, on, demoPath, on.AdminKey, after), 1+demoUpdates)
		increasing(t, "demo resumed", evs[1:])
		sameEvents(t, "demo resumed", evs[1:], demoEvents)
	}
	t.Run("demo's history is whole", func(t *testing.T) { demoWhole(t, n2) })

	keptEvents := func(t *testing.T, subject string, want func(uint64) bool) {
		t.Helper()
		waitUntil(t, "the kept events of "+subject, func() bool {
			_, kept := streamState(t, ctx, n1, subject)
			return want(kept)
		})
	}

	t.Run("a deleted embedded world leaves no events", func(t *testing.T) {
		if r := n1.Do(http.MethodPost, "/worlds", n1.AdminKey, nil, map[string]any{"clientId": "east", "title": "East", "seed": "demo"}); r.Status != http.StatusOK {
			t.Fatalf("make east: %d %s", r.Status, r.Body)
		}
		waitUntil(t, "n3 knowing that n1 hosts east", func() bool {
			for _, h := range n3.Registry().Snapshot() {
				if h.ClientID == "east" && h.Node == "n1" && h.Live {
					return true
				}
			}
			return false
		})
		for i := range 3 {
			bio := strings.Repeat(fmt.Sprintf("%07d", i), large/7)
			if resp := n3.Do(http.MethodPut, "/update", n3.AdminKey, relaytest.Q("clientId", "east"), map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"system.details.biography": bio}}); resp.Status != http.StatusOK {
				t.Fatalf("update east %d: %d %s", i, resp.Status, resp.Body)
			}
		}
		keptEvents(t, "relay.events.east", func(n uint64) bool { return n >= 3 })
		// Deleted on its host.
		if r := n1.Do(http.MethodDelete, "/worlds/east", n1.AdminKey, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("delete east: %d %s", r.Status, r.Body)
		}
		keptEvents(t, "relay.events.east", func(n uint64) bool { return n == 0 })
	})

	t.Run("linked world", func(t *testing.T) {
		tt, clientID := connectLinked(t, n1, "fp-evbytes", nil)
		waitUntil(t, "n3 knowing that n1 hosts the linked world", func() bool {
			for _, h := range n3.Registry().Snapshot() {
				if h.ClientID == clientID && h.Node == "n1" && h.Live {
					return true
				}
			}
			return false
		})
		subject := "relay.linkevents." + clientID
		lpath := "/actor/subscribe?clientId=" + clientID + "&userId=Gamemaster"
		onEdge := grpcStream(t, ctx, n3, n3.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: clientID, UserId: "Gamemaster"})
		if ev := take(t, "n3", onEdge, 1)[0]; ev.Name != "connected" {
			t.Fatalf("n3: first event %s %s", ev.Name, ev.Data)
		}
		before, _ := streamState(t, ctx, n1, subject)
		evs := paced(t, "linked on n3", onEdge, updates, func(i int) {
			bio := strings.Repeat(fmt.Sprintf("%07d", i), large/7)
			if err := tt.Emit("actor-event", map[string]any{"actorUuid": "Actor.hero", "eventType": "update", "changes": map[string]any{"_id": "hero", "biography": bio}}); err != nil {
				t.Fatal(err)
			}
		})
		increasing(t, "linked on n3", evs)
		growth := settledGrowth(t, ctx, n1, subject, before, evRingBytes)
		_, kept := streamState(t, ctx, n1, subject)
		t.Logf("linked world: %d events published, %d kept, the stream grew %d bytes (budget %d)", updates, kept, growth, evRingBytes)
		if growth > evRingBytes || growth < evRingBytes/2 {
			t.Fatalf("the events stream grew %d bytes for the linked world's events, want between half the budget and the budget %d", growth, evRingBytes)
		}
		after := strconv.FormatUint(evs[0].ID, 10)
		resumed := take(t, "linked resumed on n2", sseStream(t, ctx, n2, lpath, n2.AdminKey, after), 2)
		if resumed[1].Name != "reset" {
			t.Fatalf("resume from %s on n2: %s %s, want the reset", after, resumed[1].Name, resumed[1].Data)
		}
		demoWhole(t, n2)

		// Unpaired, it keeps only its last event, which its numbering
		// goes on from.
		if r := n2.Do(http.MethodDelete, "/linked-worlds/"+clientID, n2.AdminKey, nil, nil); r.Status != http.StatusOK {
			t.Fatalf("unpair: %d %s", r.Status, r.Body)
		}
		keptEvents(t, subject, func(n uint64) bool { return n == 1 })
	})
}
