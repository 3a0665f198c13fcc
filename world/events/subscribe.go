package events

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// Errors that end a subscription, the world's own.
var (
	// ErrOverflow reports a subscriber that fell more than its queue behind;
	// it may resume from the last event it received.
	ErrOverflow = world.ErrSubscriberBehind
	// ErrClosed reports that the hub was closed.
	ErrClosed = world.ErrSubscriptionEnded
)

// Request describes a subscription: the world's request (channel, filters,
// resume point) and the user the subscriber reads as.
type Request struct {
	world.EventRequest
	// User is the tabletop user the subscriber reads as; nil is GM-level.
	User *world.User
}

// Event is one event as a subscriber receives it (the world's
// [world.Event]): its payload is already what the subscriber's user may
// read, and the same bytes for every subscriber receiving that payload.
type Event = world.Event

// Reset says that a resume asked for events the hub no longer has (or
// never had): the subscriber missed events and should reload what it
// follows. Head is the sequence of the last event published; the stream
// goes live after it.
type Reset = world.EventReset

// Subscription is one subscriber's view of a world's events.
type Subscription struct {
	stream *stream
	stats  *hubStats // the hub's counters
	req    Request
	key    string // the normalised filter value of the channel
	// class identifies the subscriptions that receive exactly the same
	// events (same channel, filter and user): the dispatcher works out
	// what they receive once per class.
	class filterClass
	from  uint64 // live events start after this sequence
	limit int    // the most events that may wait in queue
	// limitBytes bounds the payloads waiting in queue (the hub's
	// RingBytes): events the ring would no longer replay are not held
	// for a slow subscriber either.
	limitBytes int64

	// qmu guards queue and isOverflowed. The queue grows on demand up to
	// limit rather than being preallocated, so an idle subscriber costs
	// little; ready holds a token while events wait.
	qmu          sync.Mutex
	queue        []Event
	queuedBytes  int64 // the payloads of queue
	isOverflowed bool
	ready        chan struct{}
	// wokenBy is the fan-out that woke the reader, until the reader takes
	// its events (see fanOut.inFlight); isClosed is set by Close.
	wokenBy  *fanOut
	isClosed bool
	// listed is set while the subscription is on its dispatcher's wake
	// list; the dispatcher's alone.
	listed bool

	// writer, once set by Push, takes the live events instead of Next,
	// from the hub's writer goroutines (see push.go); writing is set from
	// the moment the subscription is handed to a writer goroutine until
	// its queue is empty again, and stays set while the writer finishes a
	// write in its own goroutine (until Resume). last is the last live
	// event handed to writer; box holds the queue when it came from
	// queuePool (a pushed subscription's queues are recycled, so that a
	// batch grows no new one and an idle stream holds none). All under
	// qmu.
	writer  world.EventWriter
	writing bool
	last    uint64
	box     *[]Event
	// done, once set by WhenDone, is called when the pushed subscription
	// ends by itself; doneCalled is set when it was (or must never be),
	// and stopDone unhooks it from the hub's end. All under qmu.
	done       func(error)
	doneCalled bool
	stopDone   func() bool

	closeOnce sync.Once

	replay []Event
	reset  *Reset
}

// Subscribe starts a subscription on a world's events. The world's
// retained events are loaded on first use. Close the subscription when
// done.
func (h *Hub) Subscribe(ctx context.Context, e *world.Engine, req Request) (*Subscription, error) {
	return h.subscribe(ctx, h.stream(e.Info().ClientID), e, req)
}

// subscribe starts a subscription on the world stream s, loading the
// stream from e's journal when it was not loaded yet (e nil: a fed stream,
// see feed.go).
func (h *Hub) subscribe(ctx context.Context, s *stream, e *world.Engine, req Request) (*Subscription, error) {
	sub := &Subscription{
		stream: s,
		stats:  &h.stats,
		req:    req,
		key:    filterKey(req),
		class:  classOf(req),
		limit:  h.opts.QueueSize,
		ready:  make(chan struct{}, 1),

		limitBytes: h.opts.RingBytes,
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.loadLocked(ctx, e); err != nil {
		return nil, err
	}
	sub.from = s.head
	if req.Resume {
		var oldest uint64
		if s.ring.n > 0 {
			oldest = s.ring.oldest()
		}
		complete := req.After <= s.head && (req.After == s.head || oldest > 0 && oldest <= req.After+1)
		if !complete {
			sub.reset = &Reset{LastEventID: req.After, Oldest: oldest, Head: s.head}
		} else {
			for _, ev := range s.ring.after(req.After) {
				if out, ok := sub.deliverable(ev); ok {
					sub.replay = append(sub.replay, out)
				}
			}
		}
	}
	set := s.subs[req.Channel]
	if set == nil {
		set = map[*Subscription]struct{}{}
		s.subs[req.Channel] = set
	}
	set[sub] = struct{}{}
	s.dirty = true
	h.stats.open.Add(1)
	return sub, nil
}

// filterClass identifies the subscriptions that receive the same events.
// Users are told apart by identity: subscriptions of one user through
// different requests are classes of their own, which costs sharing, never
// correctness.
type filterClass struct {
	channel Channel
	key     string
	hooks   string
	user    *world.User
}

func classOf(req Request) filterClass {
	c := filterClass{channel: req.Channel, key: filterKey(req), user: req.User}
	if req.Channel == ChannelHooks {
		c.hooks = strings.Join(req.Hooks, "\x00")
	}
	if req.User.IsGM() {
		// Every GM-level reader sees everything.
		c.user = nil
	}
	return c
}

// filterKey normalises the filter of the request's channel to the form
// events carry: an actor uuid, a scene id, a combat id.
func filterKey(req Request) string {
	switch req.Channel {
	case ChannelActor:
		a := strings.TrimSpace(req.ActorUUID)
		if a != "" && !strings.HasPrefix(a, "Actor.") {
			a = "Actor." + a
		}
		return a
	case ChannelScene:
		return strings.TrimPrefix(strings.TrimSpace(req.SceneID), "Scene.")
	case ChannelCombat:
		return strings.TrimPrefix(strings.TrimSpace(req.EncounterID), "Combat.")
	}
	return ""
}

// Reset reports whether the resume asked for was impossible, and why.
func (sub *Subscription) Reset() (Reset, bool) {
	if sub.reset == nil {
		return Reset{}, false
	}
	return *sub.reset, true
}

// Start is the sequence after which live events begin: the last event
// published when the subscription started.
func (sub *Subscription) Start() uint64 { return sub.from }

// Replay returns the retained events after the resume point that the
// subscriber may see, oldest first; live events follow them with neither
// gap nor overlap.
func (sub *Subscription) Replay() []Event { return sub.replay }

// Next waits for the next live event. It fails with ErrOverflow once the
// subscriber fell behind (its queue was full when an event came), with
// ErrClosed when the hub closes, and with the context's error.
func (sub *Subscription) Next(ctx context.Context) (Event, error) {
	for {
		sub.qmu.Lock()
		if sub.isOverflowed {
			sub.qmu.Unlock()
			return Event{}, ErrOverflow
		}
		if len(sub.queue) > 0 {
			ev := sub.queue[0]
			sub.queue[0] = Event{}
			sub.queue = sub.queue[1:]
			sub.queuedBytes -= queuedSize(ev)
			if len(sub.queue) == 0 {
				sub.queue = nil
				sub.queuedBytes = 0
				sub.tookLocked()
			}
			sub.qmu.Unlock()
			return ev, nil
		}
		sub.qmu.Unlock()
		if err := sub.wait(ctx); err != nil {
			return Event{}, err
		}
	}
}

// Pending reports how many live events are queued for the subscriber: Next
// returns that many without waiting. A stream writes them out together.
func (sub *Subscription) Pending() int {
	sub.qmu.Lock()
	defer sub.qmu.Unlock()
	return len(sub.queue)
}

// wait blocks until events may be waiting, the subscriber overflowed, the
// hub closes or ctx ends.
func (sub *Subscription) wait(ctx context.Context) error {
	select {
	case <-sub.ready: // events, or an overflow
		return nil
	case <-sub.stream.hub.closed:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends the subscription and releases it.
func (sub *Subscription) Close() {
	sub.closeOnce.Do(func() {
		s := sub.stream
		sub.stats.open.Add(-1)
		s.mu.Lock()
		delete(s.subs[sub.req.Channel], sub)
		s.dirty = true
		s.mu.Unlock()
		sub.qmu.Lock()
		sub.isClosed = true
		sub.doneCalled = true
		stop := sub.stopDone
		sub.tookLocked()
		sub.qmu.Unlock()
		if stop != nil {
			stop()
		}
	})
}

// offer queues the live events of evs that the subscriber wants and may
// see; the dispatcher wakes the reader later (fanOut).
func (sub *Subscription) offer(evs []Event) (queued int) {
	sub.qmu.Lock()
	defer sub.qmu.Unlock()
	return sub.offerLocked(evs)
}

// wake wakes the reader for its queued events, counting it in f's
// in-flight readers until it takes them.
func (sub *Subscription) wake(f *fanOut) {
	sub.qmu.Lock()
	if sub.isClosed || sub.isOverflowed || len(sub.queue) == 0 {
		// Nothing to take: the reader took the events already, or never
		// will.
		sub.qmu.Unlock()
		return
	}
	if sub.writer != nil {
		// A pushed subscription: a writer goroutine takes its events,
		// unless one holds it already and will find them when it is done.
		if sub.writing {
			sub.qmu.Unlock()
			return
		}
		sub.writing = true
	}
	if sub.wokenBy == nil {
		sub.wokenBy = f
		f.inFlight.Add(1)
	}
	pushed := sub.writer != nil
	sub.qmu.Unlock()
	if pushed {
		sub.stream.hub.push(sub)
		return
	}
	sub.notify()
}

// tookLocked uncounts a woken reader that took its events, or that will
// never take them; the caller holds qmu.
func (sub *Subscription) tookLocked() {
	if sub.wokenBy != nil {
		sub.wokenBy.took()
		sub.wokenBy = nil
	}
}

// deliverableOf returns the events of evs that the subscriber wants and
// may see, as it receives them, whether live or not; the same for every
// subscription of its class.
func (sub *Subscription) deliverableOf(evs []*event) []Event {
	var out []Event
	for _, ev := range evs {
		if d, ok := sub.deliverable(ev); ok {
			out = append(out, d)
		}
	}
	return out
}

// offerLocked queues the live ones of evs, which deliverableOf gave for
// the subscriber's class, in one go; a queue that would pass its limit
// overflows the subscription. It returns how many it queued, for the
// caller to count as delivered (Stats). The caller holds qmu; the
// dispatcher wakes the reader later.
func (sub *Subscription) offerLocked(evs []Event) (queued int) {
	if sub.isOverflowed {
		return 0
	}
	if sub.queue == nil && sub.writer != nil {
		sub.box = queuePool.Get().(*[]Event)
		sub.queue = (*sub.box)[:0]
	}
	n := len(sub.queue)
	for _, ev := range evs {
		if ev.Seq <= sub.from {
			continue
		}
		size := queuedSize(ev)
		if len(sub.queue) >= sub.limit || len(sub.queue) > 0 && sub.queuedBytes+size > sub.limitBytes {
			sub.overflowLocked()
			return 0
		}
		sub.queue = append(sub.queue, ev)
		sub.queuedBytes += size
	}
	return len(sub.queue) - n
}

// queuedSize is what an event waiting in a subscriber's queue counts
// against its byte limit.
func queuedSize(ev Event) int64 { return int64(len(ev.Data) + len(ev.Name) + eventOverhead) }

// queuePool recycles the queues of pushed subscriptions (see box).
var queuePool = sync.Pool{New: func() any {
	q := make([]Event, 0, 16)
	return &q
}}

// notify wakes the subscriber's reader, if it waits.
func (sub *Subscription) notify() {
	select {
	case sub.ready <- struct{}{}:
	default:
	}
}

// overflow ends the subscription with ErrOverflow.
func (sub *Subscription) overflow() {
	sub.qmu.Lock()
	defer sub.qmu.Unlock()
	sub.overflowLocked()
}

func (sub *Subscription) overflowLocked() {
	if !sub.isOverflowed {
		sub.stats.overflowed.Add(1)
	}
	sub.isOverflowed = true
	sub.queue = nil
	sub.queuedBytes = 0
	sub.tookLocked()
	sub.notify() // the reader sees the flag
	sub.doneLocked()
}

// deliverable applies the subscription's filter and its user's read rights
// to an event.
func (sub *Subscription) deliverable(ev *event) (Event, bool) {
	if ev.Channel != sub.req.Channel {
		return Event{}, false
	}
	switch sub.req.Channel {
	case ChannelHooks:
		if len(sub.req.Hooks) > 0 && !slices.Contains(sub.req.Hooks, ev.Name) {
			return Event{}, false
		}
	default:
		if sub.key != "" && ev.Key != sub.key {
			return Event{}, false
		}
	}
	data := ev.viewFor(sub.req.User)
	if data == nil {
		return Event{}, false
	}
	return Event{Seq: ev.Seq, Name: ev.Name, Data: data}, true
}
