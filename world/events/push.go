package events

import (
	"context"
	"runtime"

	"github.com/tabletop-relay/relay/world"
)

// Pushed subscriptions. A stream whose transport can write without
// blocking (the SSE bridge over HTTP/1.1) does not take its events with
// Next in a goroutine of its own: it hands the subscription a
// [world.EventWriter] (Push), and the dispatcher's waves (fanout.go) hand
// the subscriptions with events to a few writer goroutines shared by the
// whole hub, one per processor. A writer takes everything queued for a
// subscription and writes it in one go. No goroutine is woken per
// subscriber, and however many events come, each subscriber costs one
// write per cycle through the subscribers, so delivery stays within about
// a cycle.
//
// A writer never blocks on a connection: an EventWriter that cannot write
// everything at once keeps the rest and finishes it in a goroutine of its
// own, and the subscription stays with it (its events wait in its queue,
// which overflows as a slow reader's always did) until it calls Resume.

var _ world.EventPusher = (*Subscription)(nil)

// maxPooledQueue bounds the capacity of the queues recycled.
const maxPooledQueue = 4096

// push hands a subscription with events to the hub's writers, starting
// them on first use; the subscription is marked writing.
func (h *Hub) push(sub *Subscription) {
	h.mu.Lock()
	if !h.writers && !h.closing {
		h.writers = true
		n := runtime.GOMAXPROCS(0)
		h.wg.Add(n)
		for range n {
			go h.writer()
		}
	}
	h.mu.Unlock()
	select {
	case h.work <- sub:
	case <-h.closed:
	}
}

// writer writes the subscriptions handed to it until the hub closes.
func (h *Hub) writer() {
	defer h.wg.Done()
	for {
		select {
		case sub := <-h.work:
			sub.write()
		case <-h.closed:
			return
		}
	}
}

// Push implements [world.EventPusher].
func (sub *Subscription) Push(w world.EventWriter) {
	sub.qmu.Lock()
	sub.writer = w
	sub.last = max(sub.last, sub.from)
	start := !sub.writing && len(sub.queue) > 0 && !sub.isClosed && !sub.isOverflowed
	if start {
		sub.writing = true
	}
	sub.qmu.Unlock()
	if start {
		// The events queued before: written here, at once, without
		// blocking.
		sub.write()
	}
}

// Resume implements [world.EventPusher]: the writer finished the write it
// kept, so the events queued meanwhile are written now.
func (sub *Subscription) Resume() { sub.write() }

// Last implements [world.EventPusher].
func (sub *Subscription) Last() uint64 {
	sub.qmu.Lock()
	defer sub.qmu.Unlock()
	return max(sub.last, sub.from)
}

// Wait implements [world.EventPusher].
func (sub *Subscription) Wait(ctx context.Context) error {
	for {
		sub.qmu.Lock()
		behind := sub.isOverflowed && !sub.writing
		sub.qmu.Unlock()
		if behind {
			return ErrOverflow
		}
		if err := sub.wait(ctx); err != nil {
			return err
		}
	}
}

// WhenDone implements [world.EventPusher].
func (sub *Subscription) WhenDone(f func(error)) {
	hub := sub.stream.hub
	sub.qmu.Lock()
	defer sub.qmu.Unlock()
	if sub.done != nil || sub.doneCalled {
		return
	}
	sub.done = f
	sub.stopDone = context.AfterFunc(hub.closedCtx, func() {
		sub.qmu.Lock()
		call := !sub.doneCalled
		sub.doneCalled = true
		sub.qmu.Unlock()
		if call {
			f(ErrClosed)
		}
	})
	sub.doneLocked()
}

// doneLocked calls the subscription's WhenDone function, in a goroutine of
// its own, once it overflowed and no write is under way any more. The
// caller holds qmu.
func (sub *Subscription) doneLocked() {
	if sub.done == nil || sub.doneCalled || !sub.isOverflowed || sub.writing {
		return
	}
	sub.doneCalled = true
	go sub.done(ErrOverflow)
}

// write hands the subscription's queued events to its writer until the
// queue is empty, or until the writer keeps a write to finish in its own
// goroutine (it calls Resume then). The caller owns the subscription's
// writing mark.
func (sub *Subscription) write() {
	for {
		sub.qmu.Lock()
		if sub.isClosed || sub.isOverflowed || len(sub.queue) == 0 {
			sub.writing = false
			sub.tookLocked()
			if sub.isOverflowed {
				// Wait reports the overflow once no write is under way.
				sub.notify()
				sub.doneLocked()
			}
			sub.qmu.Unlock()
			return
		}
		evs, box := sub.queue, sub.box
		sub.queue, sub.box = nil, nil
		sub.queuedBytes = 0
		sub.last = evs[len(evs)-1].Seq
		sub.tookLocked()
		w := sub.writer
		sub.qmu.Unlock()
		done := w.WriteEvents(evs)
		clear(evs)
		if box != nil && cap(evs) <= maxPooledQueue {
			*box = evs[:0]
			queuePool.Put(box)
		}
		if !done {
			return
		}
	}
}
