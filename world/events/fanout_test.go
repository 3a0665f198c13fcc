package events_test

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"relay/world"
	"relay/world/events"
)

// frameOf builds a recognisable encoding of an event and counts the builds.
func frameOf(builds *atomic.Int64) func(events.Event) []byte {
	return func(ev events.Event) []byte {
		builds.Add(1)
		return append([]byte(ev.Name+" "), ev.Data...)
	}
}

func TestFramesAreSharedPerPayloadView(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	gms := []*events.Subscription{
		subscribe(t, hub, e, events.Request{Channel: events.ChannelActor}),
		subscribe(t, hub, e, events.Request{Channel: events.ChannelActor, ActorUUID: guard}),
	}
	limited := []*events.Subscription{
		subscribe(t, hub, e, events.Request{Channel: events.ChannelActor, User: alice}),
		subscribe(t, hub, e, events.Request{Channel: events.ChannelActor, User: alice, ActorUUID: guard}),
	}
	update(t, e, guard, world.Document{"name": "Captain", "system.attributes.hp.value": 4}) // LIMITED for Alice

	var builds atomic.Int64
	build := frameOf(&builds)
	var gmFrames, limitedFrames [][]byte
	for _, sub := range gms {
		ev, _ := next(t, sub)
		gmFrames = append(gmFrames, ev.Frame(build))
	}
	for _, sub := range limited {
		ev, _ := next(t, sub)
		limitedFrames = append(limitedFrames, ev.Frame(build))
	}
	if n := builds.Load(); n != 2 {
		t.Fatalf("%d frames built for two payload views, want 2", n)
	}
	if &gmFrames[0][0] != &gmFrames[1][0] || &limitedFrames[0][0] != &limitedFrames[1][0] {
		t.Fatal("subscribers of the same payload view got frames of their own")
	}
	if !bytes.Contains(gmFrames[0], []byte(`"hp"`)) {
		t.Fatalf("GM frame %s lacks the full changes", gmFrames[0])
	}
	if bytes.Contains(limitedFrames[0], []byte(`"hp"`)) || !bytes.Contains(limitedFrames[0], []byte(`"Captain"`)) {
		t.Fatalf("LIMITED frame %s, want the name only", limitedFrames[0])
	}
}

func TestUnpublishedEventsBuildTheirOwnFrame(t *testing.T) {
	t.Parallel()
	var builds atomic.Int64
	ev := events.Event{Name: "overflow", Data: []byte(`{}`)}
	ev.Frame(frameOf(&builds))
	ev.Frame(frameOf(&builds))
	if builds.Load() != 2 {
		t.Fatalf("%d builds, want one per call", builds.Load())
	}
}

// TestEveryReaderOfManyIsWoken has more subscribers than one wave, half of
// which never read: every reading subscriber still receives every event,
// promptly, and in order.
func TestEveryReaderOfManyIsWoken(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{Coalesce: time.Millisecond})
	const readers, stalled, changes = 300, 300, 5
	var subs []*events.Subscription
	for i := range readers + stalled {
		sub := subscribe(t, hub, e, events.Request{Channel: events.ChannelActor, ActorUUID: aria})
		if i%2 == 0 {
			subs = append(subs, sub)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	got := make([][]uint64, len(subs))
	for i, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var batch []events.Event
			for len(got[i]) < changes {
				var err error
				batch, err = sub.NextBatch(ctx, nil, batch)
				if err != nil {
					return
				}
				for _, ev := range batch {
					got[i] = append(got[i], ev.Seq)
				}
			}
		}()
	}
	start := time.Now()
	for i := range changes {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i + 1})
	}
	wg.Wait()
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("delivery took %v", elapsed)
	}
	for i, seqs := range got {
		if len(seqs) != changes {
			t.Fatalf("reader %d got %d events, want %d", i, len(seqs), changes)
		}
		for j := 1; j < len(seqs); j++ {
			if seqs[j] <= seqs[j-1] || seqs[j] != got[0][j] {
				t.Fatalf("reader %d got sequences %v, want %v", i, seqs, got[0])
			}
		}
	}
}
