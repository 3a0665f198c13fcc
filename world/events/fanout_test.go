package events_test

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

func TestPayloadsAreSharedPerView(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	gms := []*events.Subscription{
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}}),
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: guard}}),
	}
	limited := []*events.Subscription{
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}, User: alice}),
		subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: guard}, User: alice}),
	}
	update(t, e, guard, world.Document{"name": "Captain", "system.attributes.hp.value": 4}) // LIMITED for Alice

	var gmData, limitedData [][]byte
	for _, sub := range gms {
		ev, _ := next(t, sub)
		gmData = append(gmData, ev.Data)
	}
	for _, sub := range limited {
		ev, _ := next(t, sub)
		limitedData = append(limitedData, ev.Data)
	}
	if &gmData[0][0] != &gmData[1][0] || &limitedData[0][0] != &limitedData[1][0] {
		t.Fatal("subscribers of the same payload view got payloads of their own")
	}
	if !bytes.Contains(gmData[0], []byte(`"hp"`)) {
		t.Fatalf("GM payload %s lacks the full changes", gmData[0])
	}
	if bytes.Contains(limitedData[0], []byte(`"hp"`)) || !bytes.Contains(limitedData[0], []byte(`"Captain"`)) {
		t.Fatalf("LIMITED payload %s, want the name only", limitedData[0])
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
		sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
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
			for len(got[i]) < changes {
				ev, err := sub.Next(ctx)
				if err != nil {
					return
				}
				got[i] = append(got[i], ev.Seq)
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
