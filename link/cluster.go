package link

import (
	"context"
	"encoding/json"

	"github.com/tabletop-relay/relay/world"
)

// In a cluster, a linked world's events come from the node that holds its
// socket (its host) and are followed on other nodes too (package
// cluster/eventbus): the host hands each event to OnPublish; another node
// Feeds it to its own Events and serves SubscribeFed's subscriptions from
// them, with the same ids, filters and read rules. When the tabletop
// reconnects to another node, that node continues the world's numbering
// from the cluster's last event (ContinueFrom), so ids never repeat and a
// subscriber resumes across the move.

// wireEvent is a linked event as it travels between nodes.
type wireEvent struct {
	Seq       uint64             `json:"seq"`
	Name      string             `json:"name"`
	Data      json.RawMessage    `json:"data"`
	Channel   world.EventChannel `json:"ch"`
	Filter    string             `json:"filter,omitempty"`
	Ownership map[string]float64 `json:"own,omitempty"`
}

func (le linkedEvent) wire() wireEvent {
	return wireEvent{Seq: le.Seq, Name: le.Name, Data: le.Data, Channel: le.channel, Filter: le.filter, Ownership: le.ownership}
}

// OnPublish makes the events hand each event of the worlds connected here
// to fn, encoded, in order; fn runs with the events locked and must not
// block. Set it before the first event.
func (e *Events) OnPublish(fn func(clientID string, records []world.JournalRecord)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.published = fn
}

// ContinueFrom sets the function asked, once per world, at the world's
// first event on this node: the world's numbering continues after what it
// returns (the last event the cluster has of the world). Set it before the
// first event.
func (e *Events) ContinueFrom(fn func(clientID string) uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.continueFrom = fn
}

// number makes sure the world's numbering is known before its first event
// here is numbered; the question to the cluster is asked without the lock.
func (e *Events) number(clientID string) {
	e.mu.Lock()
	w := e.world(clientID)
	ask := e.continueFrom
	if w.numbered || ask == nil {
		w.numbered = true
		e.mu.Unlock()
		return
	}
	e.mu.Unlock()
	last := ask(clientID)
	e.mu.Lock()
	defer e.mu.Unlock()
	if !w.numbered {
		w.numbered = true
		w.seq = max(w.seq, last)
	}
}

// Feed adds events of a linked world connected to another node, as that
// node's OnPublish gave them, oldest first. Events at or below the last one
// known are skipped; when the first new event does not follow it, events
// were lost: the retained ones are dropped (a resume from before the gap
// gets the reset event) and every subscriber is told it fell behind.
func (e *Events) Feed(clientID string, records []world.JournalRecord) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.world(clientID)
	w.numbered = true
	for _, r := range records {
		if r.Seq <= w.seq {
			continue
		}
		var we wireEvent
		if json.Unmarshal(r.Data, &we) != nil {
			continue
		}
		if w.seq != 0 && r.Seq != w.seq+1 {
			w.ring = nil
			for s := range w.subs {
				s.fall()
			}
		}
		le := linkedEvent{channel: we.Channel, filter: we.Filter, ownership: we.Ownership}
		le.Seq, le.Name, le.Data = r.Seq, we.Name, we.Data
		w.seq = r.Seq
		e.keep(w, le)
	}
}

// Head returns the sequence of the world's last event here (0 when none).
func (e *Events) Head(clientID string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.world(clientID).seq
}

// SubscribeFed starts a subscription on the events of a linked world
// connected to another node, which Feed brings here.
func (e *Events) SubscribeFed(_ context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	return e.subscribe(clientID, user, req)
}

// Via makes the subscriptions to every linked world's events go through
// fn, which ends in SubscribeFed: in a cluster, the event bus, which
// follows the world's events wherever its socket is, so that subscribers
// here keep receiving them when the tabletop moves to another node, and
// resume from events this node never saw. Set it before the first
// subscription.
func (e *Events) Via(fn func(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.via = fn
}

// subscribeVia returns the function set by Via, if any.
func (e *Events) subscribeVia() func(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.via
}
