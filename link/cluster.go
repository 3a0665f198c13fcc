package link

import (
	"context"

	"github.com/tabletop-relay/relay/world"
)

// In a cluster, a linked world's events come from the node that holds its
// socket (its host) and are followed on other nodes too (package
// cluster/eventbus): the host hands each event to OnPublish, encoded as
// the journal keeps it; another node Feeds it to its own Events and serves
// SubscribeFed's subscriptions from them, with the same ids, filters and
// read rules. When the tabletop reconnects to another node, that node
// continues the world's numbering after the cluster's last event
// (ContinueFrom), so ids never repeat and a subscriber resumes across the
// move.

// OnPublish makes the events hand each event of the worlds connected here
// to fn, encoded as the journal keeps it, in order; fn runs with the
// events locked and must not block. Set it before the first event.
func (e *Events) OnPublish(fn func(clientID string, records []world.JournalRecord)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.published = fn
}

// ContinueFrom sets the function asked, once per world, before the
// world's first event on this node is numbered: the world's numbering
// continues after what it returns (the last event the cluster has of the
// world) when that is beyond what this node has. Set it before the first
// event.
func (e *Events) ContinueFrom(fn func(clientID string) uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.continueFrom = fn
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

// numberLocked makes sure, in a cluster, that the world's numbering is
// known before its next event here is numbered; e.mu is held, and let go
// while the cluster is asked.
func (e *Events) numberLocked(clientID string, w *worldEvents) {
	ask := e.continueFrom
	if w.numbered || ask == nil {
		return
	}
	e.mu.Unlock()
	last := ask(clientID)
	e.mu.Lock()
	if !w.numbered {
		w.numbered = true
		w.seq = max(w.seq, last)
	}
}

// publishLocked hands events just numbered here to OnPublish's function;
// e.mu is held.
func (e *Events) publishLocked(clientID string, fresh []linkedEvent) {
	if e.published == nil || len(fresh) == 0 {
		return
	}
	out := make([]world.JournalRecord, 0, len(fresh))
	for i := range fresh {
		if data, err := fresh[i].encode(); err == nil {
			out = append(out, world.JournalRecord{Seq: fresh[i].Seq, Data: data})
		}
	}
	e.published(clientID, out)
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
		le, err := decodeEvent(JournalEvent{Seq: r.Seq, Data: r.Data})
		if err != nil {
			continue
		}
		if w.seq != 0 && r.Seq != w.seq+1 {
			w.ring, w.ringBytes = nil, 0
			for s := range w.subs {
				s.fall()
			}
		}
		w.seq = r.Seq
		w.keep(le, e.limits.RingBytes)
		for s := range w.subs {
			s.offer(le)
		}
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

// Connected tells the events that a world's tabletop connected here (give
// it to [HubOptions].OnConnect). In a cluster the tabletop may have been
// connected to another node since this one last numbered the world's
// events, so the numbering is settled with the cluster again before the
// world's next event; on a node alone it changes nothing.
func (e *Events) Connected(info ConnInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if w := e.worlds[info.ClientID]; w != nil {
		w.numbered = false
	}
}

// Disconnected is told that a world's tabletop left (give it to
// [HubOptions].OnDisconnect). When nobody follows the world's events and
// the journal holds every one of them, the world's retained events leave
// memory: they are read back from the journal when the world is next
// followed or sends an event, as after a restart.
func (e *Events) Disconnected(clientID string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.worlds[clientID]
	if w == nil || e.journal == nil || w.noJournal || w.working || len(w.inbox) > 0 || len(w.subs) > 0 {
		return
	}
	delete(e.worlds, clientID)
}
