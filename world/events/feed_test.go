package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

// TestFedHubAppliesTheSameRules feeds a second hub (another node's) with
// what the host's hub publishes: its subscribers get the same ids, the
// same filtering by read rules, and resume like the host's.
func TestFedHubAppliesTheSameRules(t *testing.T) {
	t.Parallel()
	e, host := openDemo(t, t.TempDir(), events.Options{})
	// A ring large enough that the dispatcher never falls behind it here;
	// the reset below writes more than it holds.
	const ringSize = 16
	remote := events.New(events.Options{RingSize: ringSize})
	t.Cleanup(remote.Close)
	var mu sync.Mutex
	var published [][]world.JournalRecord
	host.OnPublish(func(clientID string, recs []world.JournalRecord) {
		if clientID != demo.ClientID {
			t.Errorf("published for %q", clientID)
		}
		mu.Lock()
		published = append(published, recs)
		mu.Unlock()
		remote.Feed(clientID, recs)
	})
	actors := world.EventRequest{Channel: events.ChannelActor}
	if _, err := remote.SubscribeFed(demo.ClientID, events.Request{EventRequest: actors}); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("subscribing before any feed: %v, want ErrUnavailable", err)
	}
	remote.Feed(demo.ClientID, nil) // the stream starts, empty
	hostPlayer := subscribe(t, host, e, events.Request{EventRequest: actors, User: alice})
	sub := func(req events.Request) *events.Subscription {
		s, err := remote.SubscribeFed(demo.ClientID, req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	player := sub(events.Request{EventRequest: actors, User: alice})
	gm := sub(events.Request{EventRequest: actors})

	update(t, e, goblin, world.Document{"system.attributes.hp.value": 3}) // NONE for Alice
	update(t, e, guard, world.Document{"name": "Captain"})                // LIMITED
	update(t, e, aria, world.Document{"system.attributes.hp.value": 5})   // OWNER

	for range 3 {
		next(t, gm)
	}
	for range 2 {
		want, wantData := next(t, hostPlayer)
		got, gotData := next(t, player)
		if got.Seq != want.Seq || got.Name != want.Name || string(got.Data) != string(want.Data) {
			t.Fatalf("fed node gave %d %s %v, host gave %d %s %v", got.Seq, got.Name, gotData, want.Seq, want.Name, wantData)
		}
	}
	if got := remote.Head(demo.ClientID); got != host.Head(demo.ClientID) || got == 0 {
		t.Fatalf("fed head %d, host head %d", got, host.Head(demo.ClientID))
	}
	mu.Lock()
	n := len(published)
	mu.Unlock()
	if n != 3 {
		t.Fatalf("%d transactions published, want 3", n)
	}

	// Resume on the fed node: from the last but one event, the last; from
	// before its ring, the reset.
	head := remote.Head(demo.ClientID)
	resumed := sub(events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: head - 1}})
	if r := resumed.Replay(); len(r) != 1 || r[0].Seq != head {
		t.Fatalf("replay %v, want event %d", r, head)
	}
	for i := range ringSize {
		update(t, e, aria, world.Document{"system.attributes.hp.value": 10 + i})
	}
	old := sub(events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: head}})
	if r, ok := old.Reset(); !ok || r.LastEventID != head {
		t.Fatalf("resume from before the ring: %+v %v, want a reset", r, ok)
	}

	// Events lost between the nodes: the fed node's subscribers are told
	// they fell behind, and a resume from before the gap is a reset.
	head = remote.Head(demo.ClientID)
	data, _ := json.Marshal(map[string]any{"seq": head + 5, "ch": events.ChannelActor, "name": "actor-update", "full": map[string]any{}})
	remote.Feed(demo.ClientID, []world.JournalRecord{{Seq: head + 5, Data: data}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		if _, err := gm.Next(ctx); err != nil {
			if !errors.Is(err, events.ErrOverflow) {
				t.Fatalf("after a gap: %v, want ErrOverflow", err)
			}
			break
		}
	}
	gap := sub(events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: head}})
	if _, ok := gap.Reset(); !ok {
		t.Fatal("resume across a gap: no reset")
	}
}
