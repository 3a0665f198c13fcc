package events_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

// actorChange is an update of an actor's name, as the engine reports it.
func actorChange(t *testing.T, e *world.Engine, name string) []world.Change {
	t.Helper()
	before, err := e.Get(context.Background(), nil, aria)
	if err != nil {
		t.Fatal(err)
	}
	delete(before, "uuid")
	after := world.Clone(before)
	after["name"] = name
	return []world.Change{{Op: world.ChangeUpdate, UUID: aria, DocumentName: "Actor", Before: before, After: after}}
}

func seqs(records []world.JournalRecord) []uint64 {
	var out []uint64
	for _, r := range records {
		out = append(out, r.Seq)
	}
	return out
}

// TestJournalNumbersSeveralTransactionsInFlight: transactions recorded
// before the first commits are numbered one after the other, published in
// order, and the numbers of abandoned ones are given to the next.
func TestJournalNumbersSeveralTransactionsInFlight(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})

	first, second := actorChange(t, e, "One"), actorChange(t, e, "Two")
	r1, _ := hub.Record(e, first, nil)
	r2, _ := hub.Record(e, second, nil)
	if got := append(seqs(r1), seqs(r2)...); !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Fatalf("sequences %v, want 1..4 (two events per update)", got)
	}
	hub.Committed(demo.ClientID, first)
	if ev, _ := next(t, sub); ev.Seq != 2 {
		t.Fatalf("first published event %d, want 2", ev.Seq)
	}

	// The second transaction fails to commit, and a third one is recorded.
	hub.Abandon(e)
	third := actorChange(t, e, "Three")
	r3, _ := hub.Record(e, third, nil)
	if got := seqs(r3); !slices.Equal(got, []uint64{3, 4}) {
		t.Fatalf("after abandoning: sequences %v, want [3 4]", got)
	}
	hub.Committed(demo.ClientID, third)
	ev, data := next(t, sub)
	if ev.Seq != 4 || fmt.Sprint(data["changes"]) != fmt.Sprint(map[string]any{"name": "Three"}) {
		t.Errorf("event %d %v, want 4 with the third change", ev.Seq, data)
	}
}

// TestConcurrentWritersEventsHaveNoGapOrDuplicate: many writers at once,
// committed in groups; the events carry every sequence number once, in
// order, and the journal holds them all.
func TestConcurrentWritersEventsHaveNoGapOrDuplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	e, hub := openDemo(t, dir, events.Options{QueueSize: 10000})
	hooks := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks}})
	actors := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}})

	const writers, each = 16, 10
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if _, err := e.Update(ctx, nil, aria, world.Document{"system.attributes.hp.value": i*each + j}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	var got []uint64
	for _, sub := range []*events.Subscription{hooks, actors} {
		for range writers * each {
			ev, _ := next(t, sub)
			got = append(got, ev.Seq)
		}
	}
	if !slices.IsSorted(got[:writers*each]) || !slices.IsSorted(got[writers*each:]) {
		t.Error("events out of order")
	}
	slices.Sort(got)
	for i, s := range got {
		if s != uint64(i+1) {
			t.Fatalf("sequence %d at %d: gap or duplicate in %v", s, i, got)
		}
	}
	var stored []uint64
	if err := e.ReadJournal(ctx, 0, func(r world.JournalRecord) error {
		stored = append(stored, r.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored, got) {
		t.Errorf("journal holds %d records, events %d", len(stored), len(got))
	}
}
