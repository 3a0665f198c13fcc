package events_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// recorder is an EventWriter that records the sequences it is handed.
// With slowEvery > 0, every slowEvery-th write "keeps" its events for a
// goroutine of its own, as a writer whose socket buffer is full does, and
// that goroutine calls Resume after pause.
type recorder struct {
	sub       *events.Subscription
	slowEvery int
	pause     time.Duration
	// hold, when set, keeps every write until it is closed.
	hold chan struct{}

	mu     sync.Mutex
	seqs   []uint64
	writes int
	busy   bool // a kept write is being finished
	errs   []string
}

func (r *recorder) WriteEvents(evs []world.Event) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.busy {
		r.errs = append(r.errs, "WriteEvents called before Resume")
	}
	for _, ev := range evs {
		r.seqs = append(r.seqs, ev.Seq)
	}
	r.writes++
	switch {
	case r.hold != nil:
		r.busy = true
		go func() {
			<-r.hold
			r.finish()
		}()
		return false
	case r.slowEvery > 0 && r.writes%r.slowEvery == 0:
		r.busy = true
		go func() {
			time.Sleep(r.pause)
			r.finish()
		}()
		return false
	}
	return true
}

func (r *recorder) finish() {
	r.mu.Lock()
	r.busy = false
	r.mu.Unlock()
	r.sub.Resume()
}

func (r *recorder) got() ([]uint64, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seqs), slices.Clone(r.errs)
}

// TestPushedSubscriptionsGetEveryEventInOrder pushes the events of more
// subscribers than one wave to writers, a third of which keep some writes
// to finish later: each still gets every event once, in order, and the
// events published before Push come first.
func TestPushedSubscriptionsGetEveryEventInOrder(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{Coalesce: time.Millisecond})
	const subscribers, before, changes = 300, 2, 20
	var recs []*recorder
	for range subscribers {
		sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
		recs = append(recs, &recorder{sub: sub})
	}
	for i := range before {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i + 1})
	}
	for i, r := range recs {
		if i%3 == 0 {
			r.slowEvery, r.pause = 2, 2*time.Millisecond
		}
		r.sub.Push(r)
	}
	for i := range changes {
		update(t, e, aria, world.Document{"system.attributes.hp.value": before + i + 1})
	}
	// Every subscriber gets the same events: the first one's, read
	// through Next, are the reference.
	ref := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria, Resume: true, After: recs[0].sub.Start()}})
	var want []uint64
	for _, ev := range ref.Replay() {
		want = append(want, ev.Seq)
	}
	if len(want) != before+changes {
		t.Fatalf("%d events retained, want %d", len(want), before+changes)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i, r := range recs {
		for {
			got, errs := r.got()
			if len(errs) > 0 {
				t.Fatalf("subscriber %d: %v", i, errs)
			}
			if len(got) >= len(want) || time.Now().After(deadline) {
				if !slices.Equal(got, want) {
					t.Fatalf("subscriber %d got %v, want %v", i, got, want)
				}
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if last := r.sub.Last(); last != want[len(want)-1] {
			t.Fatalf("subscriber %d: Last %d, want %d", i, last, want[len(want)-1])
		}
	}
}

// TestPushedSubscriptionOverflowsBehindAKeptWrite keeps a writer's first
// write unfinished: events queue up to the limit, the subscription
// overflows, and Wait reports it only once the kept write is finished,
// with Last the last event handed over.
func TestPushedSubscriptionOverflowsBehindAKeptWrite(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{QueueSize: 3})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor, ActorUUID: aria}})
	r := &recorder{sub: sub, hold: make(chan struct{})}
	sub.Push(r)
	update(t, e, aria, world.Document{"system.attributes.hp.value": 1})
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if got, _ := r.got(); len(got) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first event was not pushed")
		}
	}
	first := sub.Last()
	for i := range 5 {
		update(t, e, aria, world.Document{"system.attributes.hp.value": i + 2})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	err := sub.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait during a kept write: %v, want it to wait", err)
	}
	close(r.hold)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sub.Wait(ctx); !errors.Is(err, events.ErrOverflow) {
		t.Fatalf("Wait: %v, want ErrOverflow", err)
	}
	if got, _ := r.got(); len(got) != 1 || sub.Last() != first {
		t.Fatalf("after the overflow: written %v, Last %d; want only the first event, %d", got, sub.Last(), first)
	}
}

// TestPushedSubscriptionEndsWithTheHub: Wait reports the hub's end.
func TestPushedSubscriptionEndsWithTheHub(t *testing.T) {
	t.Parallel()
	e, hub := openDemo(t, t.TempDir(), events.Options{})
	sub := subscribe(t, hub, e, events.Request{EventRequest: world.EventRequest{Channel: events.ChannelActor}})
	sub.Push(&recorder{sub: sub})
	update(t, e, aria, world.Document{"system.attributes.hp.value": 3})
	hub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := sub.Wait(ctx); !errors.Is(err, events.ErrClosed) {
		t.Fatalf("Wait: %v, want ErrClosed", err)
	}
}
