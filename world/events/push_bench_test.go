package events_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// countingWriter is an EventWriter that only counts what it is handed.
type countingWriter struct{ n *atomic.Int64 }

func (w countingWriter) WriteEvents(evs []world.Event) bool {
	w.n.Add(int64(len(evs)))
	return true
}

// BenchmarkFanout measures the hub's cost per delivered event, from Feed
// to the subscriber (ns/op is per event and subscriber): 1,000 GM-level
// subscriptions to one actor take the events of one actor update at a time (one for each), either
// pushed to the hub's writers (push) or each read with Next by a
// goroutine of its own (next), as the streams that cannot be pushed are.
// The events come from a real update of the demo world; the write to a
// connection is not part of it.
//
//	go test -run '^$' -bench Fanout -benchmem ./world/events/
func BenchmarkFanout(b *testing.B) {
	const subscribers = 1000
	// One real update's events, as a host node publishes them.
	e, source := openDemo(b, b.TempDir(), events.Options{})
	var records []world.JournalRecord
	var mu sync.Mutex
	source.OnPublish(func(_ string, rs []world.JournalRecord) {
		mu.Lock()
		records = append(records, rs...)
		mu.Unlock()
	})
	if _, err := e.Update(context.Background(), nil, aria, world.Document{"system.attributes.hp.value": 7}); err != nil {
		b.Fatal(err)
	}
	mu.Lock()
	update := records
	mu.Unlock()
	// feed feeds the update's events again, numbered after seq.
	feed := func(hub *events.Hub, seq *uint64) {
		rs := make([]world.JournalRecord, len(update))
		for i, r := range update {
			*seq++
			rs[i] = world.JournalRecord{Seq: *seq, Data: r.Data}
		}
		hub.Feed("bench", rs)
	}

	for _, mode := range []string{"push", "next"} {
		b.Run(mode, func(b *testing.B) {
			hub := events.New(events.Options{})
			defer hub.Close()
			var seq uint64
			feed(hub, &seq)
			var got atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			var readers sync.WaitGroup
			for range subscribers {
				sub, err := hub.SubscribeFed("bench", events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
				if err != nil {
					b.Fatal(err)
				}
				defer sub.Close()
				if mode == "push" {
					sub.Push(countingWriter{&got})
					continue
				}
				readers.Add(1)
				go func() {
					defer readers.Done()
					for {
						if _, err := sub.Next(ctx); err != nil {
							return
						}
						got.Add(1)
					}
				}()
			}
			b.ResetTimer()
			// waitFor waits until n events were delivered (or a minute
			// passed).
			waitFor := func(n int64) {
				for deadline := time.Now().Add(time.Minute); got.Load() < n && time.Now().Before(deadline); {
					time.Sleep(100 * time.Microsecond)
				}
			}
			for i := range b.N / subscribers {
				feed(hub, &seq)
				// Keep within the subscribers' queues and the ring.
				if i%64 == 63 {
					waitFor(int64(i-32) * subscribers)
				}
			}
			want := int64(b.N / subscribers * subscribers)
			waitFor(want)
			b.StopTimer()
			if got.Load() < want {
				b.Fatalf("%d of %d events delivered", got.Load(), want)
			}
			cancel()
			readers.Wait()
		})
	}
}
