package events

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"

	"relay/world"
)

// Errors that end a subscription.
var (
	// ErrOverflow reports a subscriber that fell more than its queue behind;
	// it may resume from the last event it received.
	ErrOverflow = errors.New("events: subscriber fell behind")
	// ErrClosed reports that the hub was closed.
	ErrClosed = errors.New("events: hub closed")
)

// Request describes a subscription.
type Request struct {
	Channel Channel
	// User is the tabletop user the subscriber reads as; nil is GM-level.
	User *world.User
	// Hooks keeps only these hook names (hooks channel); all when empty.
	Hooks []string
	// EncounterID keeps one combat's events (combat channel); `Combat.<id>`
	// works too.
	EncounterID string
	// ActorUUID keeps one actor's events (actor channel); a bare id works
	// too.
	ActorUUID string
	// SceneID keeps one scene's events (scene channel); `Scene.<id>` works
	// too.
	SceneID string
	// Resume asks for every retained event after the sequence After
	// before the live ones.
	Resume bool
	After  uint64
}

// Event is one event as a subscriber receives it: its payload is already
// what the subscriber's user may read.
type Event struct {
	Seq  uint64
	Name string
	Data json.RawMessage
}

// Reset says that a resume asked for events the hub no longer has (or
// never had): the subscriber missed events and should reload what it
// follows. Head is the sequence of the last event published; the stream
// goes live after it.
type Reset struct {
	LastEventID uint64
	Oldest      uint64 // the oldest sequence retained; 0 when none is
	Head        uint64
}

// Subscription is one subscriber's view of a world's events.
type Subscription struct {
	stream *stream
	req    Request
	key    string // the normalised filter value of the channel
	from   uint64 // live events start after this sequence
	queue  chan Event

	overflowOnce sync.Once
	overflowed   chan struct{}
	closeOnce    sync.Once

	replay []Event
	reset  *Reset
}

// Subscribe starts a subscription on a world's events. The world's
// retained events are loaded on first use. Close the subscription when
// done.
func (h *Hub) Subscribe(ctx context.Context, e *world.Engine, req Request) (*Subscription, error) {
	s := h.stream(e.Info().ClientID)
	sub := &Subscription{
		stream:     s,
		req:        req,
		key:        filterKey(req),
		queue:      make(chan Event, h.opts.QueueSize),
		overflowed: make(chan struct{}),
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
	return sub, nil
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
	select {
	case <-sub.overflowed:
		return Event{}, ErrOverflow
	default:
	}
	select {
	case ev := <-sub.queue:
		return ev, nil
	case <-sub.overflowed:
		return Event{}, ErrOverflow
	case <-sub.stream.hub.closed:
		return Event{}, ErrClosed
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
}

// Close ends the subscription and releases it.
func (sub *Subscription) Close() {
	sub.closeOnce.Do(func() {
		s := sub.stream
		s.mu.Lock()
		delete(s.subs[sub.req.Channel], sub)
		s.dirty = true
		s.mu.Unlock()
	})
}

// offer queues a live event for the subscriber, if it is one it wants and
// may see; a full queue overflows the subscription.
func (sub *Subscription) offer(ev *event) {
	if ev.Seq <= sub.from {
		return
	}
	out, ok := sub.deliverable(ev)
	if !ok {
		return
	}
	select {
	case <-sub.overflowed:
		return
	default:
	}
	select {
	case sub.queue <- out:
	default:
		sub.overflow()
	}
}

func (sub *Subscription) overflow() {
	sub.overflowOnce.Do(func() { close(sub.overflowed) })
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
	data := ev.payloadFor(sub.req.User)
	if data == nil {
		return Event{}, false
	}
	return Event{Seq: ev.Seq, Name: ev.Name, Data: data}, true
}
