package events_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// journalBytes sums the journal records a world keeps on disk.
func journalBytes(t *testing.T, e *world.Engine) (total int64, oldest uint64) {
	t.Helper()
	err := e.ReadJournal(context.Background(), 0, func(r world.JournalRecord) error {
		if oldest == 0 {
			oldest = r.Seq
		}
		total += int64(len(r.Data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total, oldest
}

// bigUpdate writes a biography of n bytes, different each time.
func bigUpdate(t *testing.T, e *world.Engine, i, n int) {
	t.Helper()
	bio := strings.Repeat(string(rune('a'+i%26)), n)
	update(t, e, aria, world.Document{"system.details.biography.value": bio})
}

// The events a world keeps for resuming stay within the byte budget in
// memory and in the world's journal on disk, the oldest leaving first, and
// a resume from before the oldest kept gets a reset; after a restart the
// same holds.
func TestRingKeepsEventsWithinItsByteBudget(t *testing.T) {
	t.Parallel()
	const budget = 512 << 10
	const size = 100 << 10
	dir := t.TempDir()
	e, hub := openDemo(t, dir, events.Options{RingBytes: budget})
	first := hub.Head(e.Info().ClientID)
	for i := range 120 {
		bigUpdate(t, e, i, size)
	}
	head := hub.Head(e.Info().ClientID)

	// Memory: what a resume from the start can replay is within the
	// budget, and a resume from the first event gets the reset.
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Resume: true, After: first}})
	r, reset := sub.Reset()
	if !reset || r.Oldest <= first+1 || r.Head != head {
		t.Fatalf("resume from %d after %d events of %d KiB: reset %v %+v, want a reset with the oldest kept past %d", first, head-first, size>>10, reset, r, first+1)
	}
	kept := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Resume: true, After: r.Oldest - 1}})
	var replayed int
	for _, ev := range kept.Replay() {
		replayed += len(ev.Data)
	}
	if _, reset := kept.Reset(); reset || len(kept.Replay()) == 0 || replayed > budget {
		t.Fatalf("resume from the oldest kept event: reset %v, %d events, %d bytes, want them within %d bytes", reset, len(kept.Replay()), replayed, budget)
	}

	// Disk: the journal keeps about as much, plus what may wait for its
	// next trim (a few MiB), far from the 24 MiB written.
	const slack = 5 << 20
	onDisk, oldest := journalBytes(t, e)
	if onDisk > budget+slack {
		t.Fatalf("the journal holds %d bytes from event %d, want at most %d", onDisk, oldest, budget+slack)
	}

	// After a restart, the ring reads back no more than its budget.
	kept.Close()
	sub.Close()
	hub.Close()
	e.Close()
	e2, hub2 := openDemo(t, dir, events.Options{RingBytes: budget})
	again := subscribe(t, hub2, e2, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Resume: true, After: first}})
	r2, reset := again.Reset()
	if !reset || r2.Head != head || r2.Oldest < r.Oldest {
		t.Fatalf("after a restart, resume from %d: reset %v %+v, want head %d and oldest at least %d", first, reset, r2, head, r.Oldest)
	}
}

// One event larger than the whole budget is kept alone, delivered, and
// makes room for the next one: nothing wedges. (Each update makes two
// such events, a hook and an actor event.)
func TestEventLargerThanTheRingBudget(t *testing.T) {
	t.Parallel()
	const budget = 40 << 10
	e, hub := openDemo(t, t.TempDir(), events.Options{RingBytes: budget})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"updateActor"}}})
	for i := range 3 {
		bigUpdate(t, e, i, 64<<10)
		ev, _ := next(t, sub)
		if len(ev.Data) < 64<<10 {
			t.Fatalf("event %d carries %d bytes, want the whole biography", ev.Seq, len(ev.Data))
		}
		// The newest event stays: a resume from just before it works.
		head := hub.Head(e.Info().ClientID)
		resumed := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, Resume: true, After: head - 1}})
		if _, reset := resumed.Reset(); reset || len(resumed.Replay()) != 1 || resumed.Replay()[0].Seq != head {
			t.Fatalf("resume from just before event %d: reset %v, replay %d events", head, reset, len(resumed.Replay()))
		}
		resumed.Close()
	}
}

// A subscriber that does not read is overflowed once the events waiting
// for it pass the byte budget, rather than holding them all.
func TestSlowSubscriberQueueIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	const budget = 256 << 10
	e, hub := openDemo(t, t.TempDir(), events.Options{RingBytes: budget})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelHooks, Hooks: []string{"updateActor"}}})
	for i := range 12 {
		bigUpdate(t, e, i, 64<<10)
	}
	waitOverflow(t, sub)
	if hub.Stats().Overflowed == 0 {
		t.Fatal("the hub counted no overflow")
	}
}

// waitOverflow reads sub until it reports ErrOverflow, for at most five
// seconds.
func waitOverflow(t *testing.T, sub *events.Subscription) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		// The reader takes nothing until the queue overflowed: it only
		// looks once every event was written.
		_, err := sub.Next(ctx)
		if errors.Is(err, events.ErrOverflow) {
			return
		}
		if err != nil {
			t.Fatalf("a subscriber that fell behind by more than the budget got %v, want ErrOverflow", err)
		}
		t.Fatal("a subscriber that fell behind by more than the budget still received events")
	}
}
