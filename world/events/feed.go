package events

import (
	"context"
	"encoding/json"

	"github.com/tabletop-relay/relay/world"
)

// A hub serves the event streams of the worlds its process hosts, and, in
// a cluster, those of worlds hosted by other nodes: their events come from
// the host already numbered and encoded (the host's [Hub.OnPublish]), and
// Feed puts them in the world's stream here, where subscriptions receive
// them through the same ring, dispatcher, filters and read rules as the
// events of a local world. Resume works alike on every node while the
// events are kept.

// OnPublish makes the hub hand each committed transaction's events, as the
// journal encodes them, to fn: the host node of a cluster publishes them
// to the other nodes. fn is called in each world's commit order, with the
// world's stream locked, so it must not block (queue and return). nil
// stops it.
func (h *Hub) OnPublish(fn func(clientID string, records []world.JournalRecord)) {
	if fn == nil {
		h.published.Store(nil)
		return
	}
	h.published.Store(&fn)
}

// Feed adds events of a world hosted elsewhere, as the host's OnPublish
// gave them, oldest first. Events at or below the last one fed are
// skipped (a feed may deliver some twice). When the first new event does
// not follow the last one, events were lost between the nodes: the ring is
// cleared, so a resume from before the gap gets the reset event, and every
// subscriber is told it fell behind. The first Feed of a world starts its
// stream: the events it gives are the retained ones, for resume.
func (h *Hub) Feed(clientID string, records []world.JournalRecord) {
	s := h.stream(clientID)
	s.mu.Lock()
	fed := false
	for _, r := range records {
		if r.Seq <= s.head {
			continue
		}
		ev := &event{}
		if json.Unmarshal(r.Data, ev) != nil {
			continue
		}
		ev.Seq = r.Seq
		ev.loaded()
		if s.head != 0 && r.Seq != s.head+1 {
			s.ring.reset()
		}
		s.ring.push(ev)
		s.head, s.recorded = r.Seq, r.Seq
		fed = true
	}
	if !s.loaded {
		s.loaded = true
		s.ring.handedOut(s.head)
		s.hub.startDispatcher(s, s.head)
		fed = false
	}
	s.mu.Unlock()
	if fed {
		s.wake()
	}
}

// Head returns the sequence of the last event of the world's stream here
// (0 when none).
func (h *Hub) Head(clientID string) uint64 {
	s := h.stream(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.head
}

// SubscribeFed starts a subscription on the events of a world hosted
// elsewhere, which Feed brings here; it fails with world.ErrUnavailable
// when none were fed yet. Close the subscription when done.
func (h *Hub) SubscribeFed(clientID string, req Request) (*Subscription, error) {
	s := h.stream(clientID)
	s.mu.Lock()
	loaded := s.loaded
	s.mu.Unlock()
	if !loaded {
		return nil, world.Errorf(world.ErrUnavailable, "The events of world %s are not available on this node yet", clientID)
	}
	// A loaded stream reads no journal, so the context is not used.
	return h.subscribe(context.Background(), s, nil, req)
}
