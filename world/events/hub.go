// Package events is the relay's event hub. It turns the changes the world
// engine commits into events on four channels (tabletop hooks, combat,
// actors, scenes), numbers them per world, keeps the most recent ones in a
// ring for resuming streams (in memory and in the world's own database, so
// that sequence numbers keep increasing across restarts), and fans them out
// to subscriptions.
//
// Each subscription filters by channel and parameters, applies the read
// rules of the world for its user to every event (as the document was at
// the time of the event), and to every other document whose data the
// event's payload carries (a chat message's speaker and targets, a token's
// actor: see embeds.go), and has a bounded queue: a subscriber that falls
// behind is told so (ErrOverflow) rather than slowing the world or anyone
// else. A subscription whose stream can write without blocking may be
// pushed instead of read (push.go): a few writer goroutines of the hub
// then write its events, everything waiting in one go, with no goroutine
// woken per subscriber.
//
// The hub is wired to a [world.Host] twice: as the worlds' [world.Journal]
// (it numbers and stores a transaction's events in the transaction itself)
// and as a [world.Host.Watch] listener (it publishes them once committed).
// A [Subscription] is a [world.EventSubscription]: the embedded worlds
// (world/embedded) offer the hub's subscriptions as their [world.Events].
package events

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// Options tune a hub. The zero value works.
type Options struct {
	// RingSize is how many events each world keeps for resuming streams;
	// 10,000 when 0.
	RingSize int
	// RingBytes bounds the memory of the events each world keeps for
	// resuming streams, as the sum of their payloads; DefaultRingBytes
	// when 0. The oldest events leave first, in memory and in the world's
	// journal, whichever of RingSize and RingBytes they pass first. It
	// also bounds the events waiting for one subscriber: a subscriber that
	// falls further behind than the events kept could replay is overflowed.
	RingBytes int64
	// QueueSize is how many events may wait for one subscriber before it
	// is overflowed; 1,024 when 0.
	QueueSize int
	// Coalesce is how long a world's dispatcher lets events gather after
	// the first one before handing them out (0: at once). A subscriber then
	// receives the events of that window together, in one write and one
	// flush, which cuts the cost of fan-out when events come faster than
	// the window; it adds at most the window to their delivery time.
	Coalesce time.Duration
}

// Defaults of the relay's configuration.
const (
	DefaultRingSize  = 10000
	DefaultQueueSize = 1024
	// DefaultRingBytes is 64 MiB: thousands of ordinary events (most are
	// a few kilobytes), and a bound on what one world's writers can make
	// the relay hold for resuming, whatever the size of their documents.
	DefaultRingBytes = 64 << 20
	// DefaultCoalesce is the relay's default Options.Coalesce: short
	// enough to leave delivery well under 100 ms, long enough to batch
	// events that come faster than 100 per second.
	DefaultCoalesce = 10 * time.Millisecond
)

// Hub publishes the events of every world of a host. It is safe for
// concurrent use.
type Hub struct {
	opts    Options
	mu      sync.Mutex
	worlds  map[string]*stream
	closing bool // set under mu: no dispatcher starts any more
	closed  chan struct{}
	// closedCtx ends when the hub closes, for the subscriptions that wait
	// for their end without a goroutine (Subscription.WhenDone).
	closedCtx context.Context
	closeCtx  context.CancelFunc
	once      sync.Once
	wg        sync.WaitGroup
	stats     hubStats
	// work hands pushed subscriptions with events to the hub's writer
	// goroutines, which start with the first one (see push.go).
	work    chan *Subscription
	writers bool // set under mu once the writers run
	// published, when set, receives each committed transaction's events
	// (see OnPublish).
	published atomic.Pointer[func(clientID string, records []world.JournalRecord)]
}

// hubStats counts what the hub's subscriptions did (see Stats). Each is
// one atomic add on its path.
type hubStats struct {
	open       atomic.Int64
	delivered  atomic.Uint64
	overflowed atomic.Uint64
}

// Stats counts a hub's subscriptions and what they received.
type Stats struct {
	// Open is the number of subscriptions not closed yet.
	Open int64
	// Delivered counts the live events queued for subscribers (an event
	// that goes to three subscribers counts three times); replayed ones
	// are not counted.
	Delivered uint64
	// Overflowed counts the subscriptions ended because they fell more
	// than their queue behind: their waiting events were dropped.
	Overflowed uint64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	return Stats{Open: h.stats.open.Load(), Delivered: h.stats.delivered.Load(), Overflowed: h.stats.overflowed.Load()}
}

var _ world.Journal = (*Hub)(nil)

// New returns a hub.
func New(opts Options) *Hub {
	if opts.RingSize <= 0 {
		opts.RingSize = DefaultRingSize
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	if opts.RingBytes <= 0 {
		opts.RingBytes = DefaultRingBytes
	}
	h := &Hub{opts: opts, worlds: map[string]*stream{}, closed: make(chan struct{}), work: make(chan *Subscription, 2*waveSize)}
	h.closedCtx, h.closeCtx = context.WithCancel(context.Background())
	return h
}

// Close stops delivering: every subscription's Next returns ErrClosed.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closing = true
	h.mu.Unlock()
	h.once.Do(func() {
		close(h.closed)
		h.closeCtx()
	})
	h.wg.Wait()
}

// Forget drops a removed world's stream: its kept events leave memory,
// every subscription of it ends as one that fell behind (ErrOverflow: its
// stream gets the documented overflow and closes), and its dispatcher
// stops. A world made later under the same client id starts a stream of
// its own, which never replays the removed world's events.
func (h *Hub) Forget(clientID string) {
	h.mu.Lock()
	s := h.worlds[clientID]
	delete(h.worlds, clientID)
	h.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	var subs []*Subscription
	for _, m := range s.subs {
		for sub := range m {
			subs = append(subs, sub)
		}
	}
	s.ring.reset()
	s.pending = nil
	s.mu.Unlock()
	close(s.gone)
	for _, sub := range subs {
		sub.overflow()
	}
}

// Closed is closed when the hub closes.
func (h *Hub) Closed() <-chan struct{} { return h.closed }

// startDispatcher runs a world's dispatcher unless the hub is closing.
func (h *Hub) startDispatcher(s *stream, from uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return
	}
	h.wg.Add(1)
	go s.dispatch(from)
}

// stream is one world's event stream.
type stream struct {
	hub      *Hub
	clientID string
	wakeup   chan struct{} // a token: events wait for the dispatcher
	// gone is closed when the world is removed (Hub.Forget): the
	// dispatcher stops once it has nothing left to hand out.
	gone chan struct{}

	mu     sync.Mutex
	loaded bool
	head   uint64 // sequence of the last published event
	ring   ring
	// recorded is the sequence of the last event Record numbered, head or
	// more; pending are the transactions Record numbered and Committed has
	// not published yet, oldest first (the world commits them in order).
	recorded uint64
	pending  []recorded
	subs     map[Channel]map[*Subscription]struct{}
	// snapshot lists the subscriptions by channel and class for the
	// dispatcher; rebuilt when dirty.
	snapshot map[Channel][]classGroup
	dirty    bool
}

// recorded is a transaction's events, numbered by Record.
type recorded struct {
	changes *world.Change // the first of the transaction's changes: its identity
	events  []*event
	// records are the events encoded, as the journal stores them.
	records []world.JournalRecord
}

// stream returns a world's stream, creating it on first use.
func (h *Hub) stream(clientID string) *stream {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.worlds[clientID]
	if s == nil {
		s = &stream{
			hub:      h,
			clientID: clientID,
			wakeup:   make(chan struct{}, 1),
			gone:     make(chan struct{}),
			ring:     ring{buf: make([]*event, h.opts.RingSize), maxBytes: h.opts.RingBytes},
			subs:     map[Channel]map[*Subscription]struct{}{},
		}
		h.worlds[clientID] = s
	}
	return s
}

// loadLocked reads the world's retained events from its journal, once,
// and starts the world's dispatcher.
func (s *stream) loadLocked(ctx context.Context, e *world.Engine) error {
	if s.loaded {
		return nil
	}
	if e != nil {
		err := e.ReadJournal(ctx, 0, func(r world.JournalRecord) error {
			ev := &event{}
			if err := json.Unmarshal(r.Data, ev); err != nil {
				return world.Wrapf(world.ErrUnavailable, err, "Could not read event %d of world %s", r.Seq, s.clientID)
			}
			ev.Seq = r.Seq
			ev.loaded()
			s.ring.push(ev)
			s.head = r.Seq
			return nil
		})
		if err != nil {
			s.ring.reset()
			s.head = 0
			return err
		}
	}
	s.loaded = true
	// The events read back are for resumes only: the dispatcher starts
	// after them.
	s.ring.handedOut(s.head)
	s.hub.startDispatcher(s, s.head)
	return nil
}

// Record numbers the events of a transaction about to be committed and
// returns them as journal records; it implements [world.Journal]. Several
// transactions may be recorded before they commit: each is numbered after
// the last one recorded.
func (h *Hub) Record(e *world.Engine, changes []world.Change, after *world.View) ([]world.JournalRecord, uint64) {
	s := h.stream(e.Info().ClientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	// A world whose journal cannot be read still gets events, numbered
	// from what is known.
	_ = s.loadLocked(context.Background(), e)
	evs := buildEvents(changes, after)
	records := make([]world.JournalRecord, 0, len(evs))
	seq := max(s.recorded, s.head)
	for _, ev := range evs {
		seq++
		ev.Seq = seq
		data, err := ev.journalJSON()
		if err != nil {
			continue
		}
		records = append(records, world.JournalRecord{Seq: seq, Data: data})
	}
	s.recorded = seq
	s.pending = append(s.pending, recorded{changes: &changes[0], events: evs, records: records})
	var keepFrom uint64
	if size := uint64(len(s.ring.buf)); seq > size {
		keepFrom = seq - size + 1
	}
	if s.ring.n > 0 {
		// The events the ring let go for its byte budget leave the
		// journal too: a resume could not use them, since subscriptions
		// replay from the ring alone. The ring has not taken this
		// transaction's events yet, so the journal keeps one transaction
		// more than the ring at most.
		keepFrom = max(keepFrom, s.ring.oldest())
	}
	return records, keepFrom
}

// Abandon forgets the transactions recorded and not committed, whose
// commit failed: the next transaction recorded takes their numbers, so
// subscribers see no gap. It implements [world.Journal].
func (h *Hub) Abandon(e *world.Engine) {
	s := h.stream(e.Info().ClientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.pending)
	s.pending = s.pending[:0]
	s.recorded = s.head
}

// Committed publishes the events of a committed transaction; it is the
// hub's [world.Host.Watch] listener. It never blocks on subscribers.
func (h *Hub) Committed(clientID string, changes []world.Change) {
	if len(changes) == 0 {
		return
	}
	s := h.stream(clientID)
	s.mu.Lock()
	var evs []*event
	var records []world.JournalRecord
	if len(s.pending) > 0 && s.pending[0].changes == &changes[0] {
		evs, records = s.pending[0].events, s.pending[0].records
		s.pending[0] = recorded{}
		s.pending = s.pending[1:]
	} else {
		// Not recorded through the journal (a world opened without it):
		// publish anyway, numbered in memory. The documents the changes
		// refer to cannot be looked up, so they are NONE to every reader
		// but GMs.
		_ = s.loadLocked(context.Background(), nil)
		evs = buildEvents(changes, nil)
		seq := max(s.recorded, s.head)
		for _, ev := range evs {
			seq++
			ev.Seq = seq
		}
		s.recorded = seq
	}
	for _, ev := range evs {
		s.ring.push(ev)
		s.head = ev.Seq
	}
	// The tap is called under the stream's lock, so that it sees each
	// world's transactions in the order of their sequence numbers.
	if tap := h.published.Load(); tap != nil && len(evs) > 0 {
		if records == nil {
			records = encodeEvents(evs)
		}
		(*tap)(clientID, records)
	}
	s.mu.Unlock()
	s.wake()
}

// wake tells the world's dispatcher that events wait.
func (s *stream) wake() {
	select {
	case s.wakeup <- struct{}{}:
	default:
	}
}

// encodeEvents encodes events as the journal stores them.
func encodeEvents(evs []*event) []world.JournalRecord {
	out := make([]world.JournalRecord, 0, len(evs))
	for _, ev := range evs {
		if data, err := json.Marshal(ev); err == nil {
			out = append(out, world.JournalRecord{Seq: ev.Seq, Data: data})
		}
	}
	return out
}

// dispatch hands each published event to the subscriptions of its channel
// until the hub closes. It runs in its own goroutine, so that fan-out to
// many subscribers costs the world's writers nothing. Subscriptions are
// given events as they come and their readers are woken in waves (see
// fanOut in fanout.go), so that each reader writes every event waiting at
// once.
func (s *stream) dispatch(done uint64) {
	defer s.hub.wg.Done()
	newFanOut(s, done).run()
}

// ring keeps the most recent events of a world, oldest first: at most
// len(buf) of them, and at most maxBytes of payloads (see
// event.footprint) once the dispatcher handed them out. The events it has
// not handed out yet (the last few milliseconds' worth) stay beyond the
// byte budget, up to burstFactor times it, so that a transaction whose
// events together pass the budget still reaches live subscribers; and the
// newest event always stays, however large, so that a resume from just
// before it works.
type ring struct {
	buf      []*event
	start, n int
	// bytes is the footprint of the events kept.
	bytes, maxBytes int64
	// dispatched is the last sequence the dispatcher handed out.
	dispatched uint64
}

// burstFactor bounds the events kept while the dispatcher has not handed
// them out: burstFactor times the byte budget.
const burstFactor = 4

func (r *ring) push(ev *event) {
	size := ev.footprint()
	for r.n > 0 && (r.n == len(r.buf) || r.overBudget(size)) {
		r.dropOldest()
	}
	r.buf[(r.start+r.n)%len(r.buf)] = ev
	r.n++
	r.bytes += size
}

// overBudget reports whether the oldest event must leave before one of
// size bytes joins; the ring must not be empty.
func (r *ring) overBudget(size int64) bool {
	if r.bytes+size <= r.maxBytes {
		return false
	}
	return r.oldest() <= r.dispatched || r.bytes+size > burstFactor*r.maxBytes
}

// handedOut records that the dispatcher handed out the events up to seq,
// and lets go of those beyond the byte budget, oldest first, keeping the
// newest.
func (r *ring) handedOut(seq uint64) {
	r.dispatched = max(r.dispatched, seq)
	for r.n > 1 && r.bytes > r.maxBytes && r.oldest() <= r.dispatched {
		r.dropOldest()
	}
}

// dropOldest lets the oldest event go; the ring must not be empty.
func (r *ring) dropOldest() {
	r.bytes -= r.buf[r.start].footprint()
	r.buf[r.start] = nil
	r.start = (r.start + 1) % len(r.buf)
	r.n--
}

func (r *ring) reset() {
	clear(r.buf)
	r.start, r.n, r.bytes = 0, 0, 0
}

func (r *ring) at(i int) *event { return r.buf[(r.start+i)%len(r.buf)] }

// oldest is the sequence of the oldest event kept; the ring must not be
// empty.
func (r *ring) oldest() uint64 { return r.at(0).Seq }

// after returns the events with a sequence above seq, oldest first.
func (r *ring) after(seq uint64) []*event {
	// Sequences increase along the ring: find the first one above seq.
	lo, hi := 0, r.n
	for lo < hi {
		mid := (lo + hi) / 2
		if r.at(mid).Seq > seq {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	out := make([]*event, 0, r.n-lo)
	for i := lo; i < r.n; i++ {
		out = append(out, r.at(i))
	}
	return out
}
