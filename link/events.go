package link

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// Defaults of the linked worlds' event streams.
const (
	// DefaultEventRetention is how many events of each linked world are
	// kept for resume, in memory and in the journal.
	DefaultEventRetention = 1024
	// DefaultEventQueue is how many events a subscriber may fall behind
	// before its stream ends with world.ErrSubscriberBehind.
	DefaultEventQueue = 256
	// DefaultEventInbox is how many of a world's event messages may wait
	// to be turned into events; more are dropped (and counted).
	DefaultEventInbox = 4096
	// DefaultRingBytes bounds the memory of the events each linked world
	// keeps for resume, and the journal's share of them on disk, as the
	// embedded worlds' hub does (events.DefaultRingBytes).
	DefaultRingBytes = 64 << 20
	// DefaultMaxEventBytes bounds one event message of a linked world:
	// twice the largest document an embedded world stores
	// (world.DefaultMaxDocumentBytes), room for a document and its
	// changes. Larger ones are dropped, counted and logged.
	DefaultMaxEventBytes = 4 << 20
	// DefaultInboxBytes bounds the event messages of one world waiting to
	// be turned into events. Once they reach it, the world's socket is not
	// read until they fall below it: a tabletop cannot send events faster
	// than the relay processes them.
	DefaultInboxBytes = 16 << 20
)

// EventLimits bound the memory the linked worlds' events hold. Zero
// values take the defaults.
type EventLimits struct {
	// RingBytes bounds the events each world keeps for resume, in memory
	// and in the journal, and the events waiting for one subscriber.
	RingBytes int64
	// MaxEventBytes bounds an event message; larger ones are dropped.
	MaxEventBytes int64
	// MaxDepth is the deepest nesting of objects and arrays allowed in the
	// documents an event message carries (world.Limits.MaxDepth); the
	// message may nest a few levels more around them (envelopeDepth).
	// Deeper ones are dropped. world.DefaultMaxDepth when 0.
	MaxDepth int
	// InboxBytes bounds each world's event messages waiting to be
	// processed (see DefaultInboxBytes).
	InboxBytes int64
	// Log receives the notice, once per world, that its events were
	// dropped for their size or depth; discarded when nil.
	Log *slog.Logger
}

func (l EventLimits) withDefaults() EventLimits {
	if l.RingBytes <= 0 {
		l.RingBytes = DefaultRingBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = DefaultMaxEventBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = world.DefaultMaxDepth
	}
	if l.InboxBytes <= 0 {
		l.InboxBytes = DefaultInboxBytes
	}
	if l.Log == nil {
		l.Log = slog.New(slog.DiscardHandler)
	}
	return l
}

// Events turns the event messages of linked worlds into the relay's event
// streams: each world's events get their sequence numbers here (from 1,
// and on from where they were after a restart when a journal keeps them,
// see SetJournal), the last DefaultEventRetention, within the RingBytes of
// SetLimits, are kept for resume, and
// each subscriber gets those of its channel that pass its filters and its
// read rules. While a module channel has subscribers it
// is turned on in the module ([Hub.SetChannel]), and off when the last
// leaves. Give [Events.Publish] to [HubOptions].OnEvent.
type Events struct {
	hub *Hub

	// undecided counts the deliveries left out because the relay could
	// not tell whether the subscriber may read the event.
	undecided atomic.Uint64
	// dropped counts the messages dropped because the world's inbox was
	// full; oversized those dropped for their size or depth.
	dropped   atomic.Uint64
	oversized atomic.Uint64
	limits    EventLimits
	// fetched counts the documents the relay asked the module for.
	fetched atomic.Uint64
	// journal, when set, keeps the retained events across restarts;
	// journalErrors counts its failures.
	journal       EventJournal
	journalErrors atomic.Uint64
	// published, continueFrom and via, when set, connect the events to
	// the other nodes of a cluster (see cluster.go).
	published    func(clientID string, records []world.JournalRecord)
	continueFrom func(clientID string) uint64
	via          func(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error)

	mu     sync.Mutex
	worlds map[string]*worldEvents
	// room is signalled (on mu) when a world's inbox shrinks, its worker
	// starts waiting for the module, or the streams close: Publish waits
	// on it while the inbox is full.
	room *sync.Cond
	// running counts the worlds' goroutines at work; idle, when not nil,
	// is closed when it drops to zero (see Drain).
	running int
	idle    chan struct{}

	// ended is closed by Close: every subscription ends.
	ended     chan struct{}
	closeOnce sync.Once
}

// NewEvents returns the event streams of hub's worlds. hub may be set
// later, before the first subscription, with SetHub (the hub is built
// with Publish as its callback).
func NewEvents() *Events {
	e := &Events{worlds: map[string]*worldEvents{}, ended: make(chan struct{}), limits: EventLimits{}.withDefaults()}
	e.room = sync.NewCond(&e.mu)
	return e
}

// SetLimits sets the bounds of the events' memory. Call it before the
// first event.
func (e *Events) SetLimits(l EventLimits) { e.limits = l.withDefaults() }

// Close ends every subscription (their Next returns
// world.ErrSubscriptionEnded) and refuses new ones: the relay is
// stopping, and a stream left open would hold up its graceful stop until
// its time-out. Later calls do nothing.
func (e *Events) Close() {
	e.closeOnce.Do(func() {
		close(e.ended)
		e.mu.Lock()
		e.room.Broadcast()
		e.mu.Unlock()
	})
}

// SetHub sets the hub whose channels subscriptions turn on.
func (e *Events) SetHub(h *Hub) { e.hub = h }

// worldEvents is one world's retained events and subscribers.
type worldEvents struct {
	// numbered is set once the world's numbering is known in a cluster:
	// at its first event here, after asking continueFrom, or at its first
	// Feed (see cluster.go).
	numbered bool
	seq      uint64
	ring     []linkedEvent // the retained events, oldest first
	// ringBytes is the footprint of ring (see linkedEvent.footprint).
	ringBytes int64
	subs      map[*subscription]struct{}
	// known is what the relay saw of the world's documents' ownership;
	// lastRound the round each running combat was last seen at.
	known     knownDocs
	lastRound map[string]any
	// combatants are the combatants of each running combat as the relay
	// last saw them, by combat id and combatant id.
	combatants map[string]map[string]world.Document
	// tokenActors are the actors of the tokens the relay learnt, by token
	// uuid, for the combatants the module stores without one
	// (combatactors.go).
	tokenActors map[string]string
	// inbox holds the messages not turned into events yet, and what
	// replies showed of documents meanwhile (applied in the same order);
	// working is set while a goroutine does that.
	inbox   []inboxItem
	working bool
	// inboxBytes is the size of the messages in inbox; asking is set
	// while the world's goroutine waits for the module, which answers on
	// the socket Publish is called from: Publish must not wait then.
	inboxBytes int64
	asking     bool
	// warned is set once the world's dropped events were logged.
	warned bool
	// noJournal is set when the world's stored events could not be read.
	noJournal bool
}

// moduleChannels maps our channels to the module's.
var moduleChannels = map[world.EventChannel]string{
	world.ChannelHooks: "hooks", world.ChannelCombat: "combat-events",
	world.ChannelActor: "actor-events", world.ChannelScene: "scene-events",
}

// Publish takes one event message of a linked world (the hub's OnEvent
// callback). Messages of channels the relay does not stream (rolls and
// chat) and malformed ones are dropped, and so are messages larger than
// the limits' MaxEventBytes or nested deeper than MaxDepth (counted, and
// logged once per world). Each world's messages are queued and turned
// into events in order by a goroutine of the world's, which may first ask
// the module who may read a document (see [Events.Undecided]). Publish
// runs on the world's socket reader: while InboxBytes of the world's
// messages wait, it waits for them to be processed, so that the socket is
// read no faster than the relay processes its events; while the world's
// goroutine waits for the module, whose answer comes on that same socket,
// messages are queued up to twice InboxBytes and dropped beyond.
func (e *Events) Publish(clientID string, ev Event) {
	size := int64(len(ev.Message))
	tooLarge := size > e.limits.MaxEventBytes || ev.Message == nil && ev.Size > 0
	if tooLarge || tooDeep(ev.Message, e.limits.MaxDepth+envelopeDepth) {
		e.refuse(clientID, ev, tooLarge)
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.world(clientID)
	for w.inboxBytes > 0 && w.inboxBytes+size > e.limits.InboxBytes && !w.asking && !e.isEnded() {
		e.room.Wait()
	}
	if len(w.inbox) >= DefaultEventInbox || w.inboxBytes > 0 && w.inboxBytes+size > 2*e.limits.InboxBytes {
		e.dropped.Add(1)
		return
	}
	w.inbox = append(w.inbox, inboxItem{ev: ev, size: size})
	w.inboxBytes += size
	e.startWork(clientID, w)
}

// refuse drops an event message over the size or depth limit: it counts
// it, and logs it the first time for the world.
func (e *Events) refuse(clientID string, ev Event, tooLarge bool) {
	e.oversized.Add(1)
	e.mu.Lock()
	w := e.world(clientID)
	first := !w.warned
	w.warned = true
	e.mu.Unlock()
	if !first {
		return
	}
	if tooLarge {
		e.limits.Log.Warn("dropped an event message of a linked world larger than the limit; further ones are dropped without notice",
			"clientId", clientID, "type", ev.Type, "bytes", max(int64(len(ev.Message)), ev.Size), "limit", e.limits.MaxEventBytes)
		return
	}
	e.limits.Log.Warn("dropped an event message of a linked world nested deeper than the limit; further ones are dropped without notice",
		"clientId", clientID, "type", ev.Type, "limit", e.limits.MaxDepth+envelopeDepth)
}

// isEnded reports whether Close was called.
func (e *Events) isEnded() bool {
	select {
	case <-e.ended:
		return true
	default:
		return false
	}
}

// inboxItem is an event message, or what a reply showed of a document.
type inboxItem struct {
	ev         Event
	size       int64 // the message's bytes
	seenUUID   string
	seenAccess world.Document
}

// startWork starts the world's goroutine unless it runs; e.mu is held.
func (e *Events) startWork(clientID string, w *worldEvents) {
	if !w.working {
		w.working = true
		e.running++
		go e.work(clientID, w)
	}
}

// work turns the world's queued messages into events until none is left.
func (e *Events) work(clientID string, w *worldEvents) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for len(w.inbox) > 0 {
		e.numberLocked(clientID, w)
		fresh := e.drain(clientID, w)
		e.publishLocked(clientID, fresh)
		if e.journal != nil && !w.noJournal && len(fresh) > 0 {
			// Subscribers have the events already; the journal keeps
			// them for resumes after a restart.
			forget := w.forgetBefore()
			e.mu.Unlock()
			e.store(clientID, fresh, forget)
			e.mu.Lock()
		}
	}
	w.inbox = nil
	w.working = false
	e.running--
	if e.running == 0 && e.idle != nil {
		close(e.idle)
		e.idle = nil
	}
}

// drain turns the world's queued messages into events and returns them;
// e.mu is held (and let go while the module is asked about a document).
func (e *Events) drain(clientID string, w *worldEvents) []linkedEvent {
	var fresh []linkedEvent
	for len(w.inbox) > 0 {
		item := w.inbox[0]
		w.inbox[0] = inboxItem{}
		w.inbox = w.inbox[1:]
		if item.size > 0 {
			w.inboxBytes -= item.size
			e.room.Broadcast()
		}
		if item.seenUUID != "" {
			w.known.put(item.seenUUID, item.seenAccess)
			continue
		}
		// Combatants the module stored without their actor take their
		// token's: learn it before the event is built.
		e.learnTokenActors(clientID, w, w.unknownTokens(messageTokens(item.ev)))
		le, ok := translator{w: w}.translate(item.ev)
		if !ok {
			continue
		}
		if le.combat != nil && e.hub != nil {
			// The module's combat events lack what players' payloads
			// and the relay's shape need: ask for the combat.
			w.ask(e)
			e.mu.Unlock()
			doc := e.fetchDoc(clientID, "Combat."+le.combat.id)
			e.mu.Lock()
			w.asking = false
			e.learnTokenActors(clientID, w, w.unknownTokens(combatTokens(doc)))
			le.completeCombat(w, doc)
		} else if le.combat != nil {
			le.completeCombat(w, nil)
		}
		if need := le.unknown(); len(need) > 0 && e.hub != nil && w.hasPlayer(le.channel) {
			// A player follows the channel and the relay does not know
			// who may read the document: ask the module, as a GM.
			w.ask(e)
			e.mu.Unlock()
			for _, uuid := range need {
				e.fetch(clientID, uuid)
			}
			e.mu.Lock()
			w.asking = false
			le.fill(&w.known)
		}
		w.seq++
		le.Seq = w.seq
		w.keep(le, e.limits.RingBytes)
		for s := range w.subs {
			s.offer(le)
		}
		fresh = append(fresh, le)
	}
	return fresh
}

// store writes a world's new events to the journal and forgets those
// before forget.
func (e *Events) store(clientID string, fresh []linkedEvent, forget uint64) {
	out := make([]JournalEvent, 0, len(fresh))
	for i := range fresh {
		if fresh[i].Seq <= forget {
			// Already past the ring's budget: not worth writing.
			continue
		}
		data, err := fresh[i].encode()
		if err != nil {
			e.journalErrors.Add(1)
			continue
		}
		out = append(out, JournalEvent{Seq: fresh[i].Seq, Data: data})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.journal.AppendEvents(ctx, clientID, out, forget); err != nil {
		e.journalErrors.Add(1)
	}
}

// keep adds le to the retained events and lets the oldest go past
// DefaultEventRetention events or ringBytes of them; the newest stays
// whatever its size. e.mu is held.
func (w *worldEvents) keep(le linkedEvent, ringBytes int64) {
	w.ring = append(w.ring, le)
	w.ringBytes += le.footprint()
	drop := 0
	for len(w.ring)-drop > 1 && (len(w.ring)-drop > DefaultEventRetention || w.ringBytes > ringBytes) {
		w.ringBytes -= w.ring[drop].footprint()
		drop++
	}
	if drop > 0 {
		clear(w.ring[:drop])
		w.ring = w.ring[drop:]
	}
}

// forgetBefore is the last sequence the journal may forget: the one
// before the oldest retained event. e.mu is held.
func (w *worldEvents) forgetBefore() uint64 {
	if len(w.ring) == 0 {
		return w.seq
	}
	return w.ring[0].Seq - 1
}

// ask marks the world's goroutine as waiting for the module and lets a
// Publish waiting for room go on; e.mu is held.
func (w *worldEvents) ask(e *Events) {
	w.asking = true
	e.room.Broadcast()
}

// Drain waits until every event message received so far is processed and
// stored in the journal, or ctx ends. The relay calls it on stopping, once
// the modules are disconnected, before it closes the journal.
func (e *Events) Drain(ctx context.Context) error {
	e.mu.Lock()
	if e.running == 0 {
		e.mu.Unlock()
		return nil
	}
	if e.idle == nil {
		e.idle = make(chan struct{})
	}
	idle := e.idle
	e.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SetJournal makes the event streams keep each linked world's retained
// events in j, and start from what j holds: a relay that restarts goes on
// numbering each world's events where it stopped, and streams resume
// across the restart. Call it before the first event.
func (e *Events) SetJournal(j EventJournal) { e.journal = j }

// hasPlayer reports whether a subscriber who is not a GM follows the
// module channel of ch; e.mu is held.
func (w *worldEvents) hasPlayer(ch world.EventChannel) bool {
	for s := range w.subs {
		if s.channel == moduleChannels[ch] && !s.user.IsGM() {
			return true
		}
	}
	return false
}

// world returns the world's state; e.mu is held.
func (e *Events) world(clientID string) *worldEvents {
	w := e.worlds[clientID]
	if w == nil {
		w = &worldEvents{subs: map[*subscription]struct{}{}}
		e.worlds[clientID] = w
		if e.journal != nil {
			e.load(clientID, w)
		}
	}
	return w
}

// load reads a world's retained events from the journal; e.mu is held. A
// world whose events cannot be read starts afresh and is not written
// either, so that what the journal has is not overwritten.
func (e *Events) load(clientID string, w *worldEvents) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stored, err := e.journal.LoadEvents(ctx, clientID)
	if err != nil {
		e.journalErrors.Add(1)
		w.noJournal = true
		return
	}
	for i, je := range stored {
		le, err := decodeEvent(je)
		stored[i] = JournalEvent{}
		if err != nil {
			e.journalErrors.Add(1)
			continue
		}
		w.keep(le, e.limits.RingBytes)
		w.seq = max(w.seq, je.Seq)
	}
}

// Subscribe implements [world.Events] for a linked world.
func (w *Linked) Subscribe(ctx context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	if w.events == nil {
		return nil, world.Errorf(world.ErrUnimplemented, "World '%s' does not offer event streams", w.clientID)
	}
	if via := w.events.subscribeVia(); via != nil {
		return via(ctx, w.clientID, user, req)
	}
	return w.events.subscribe(w.clientID, user, req)
}

// subscribe starts a subscription to a world's events.
func (e *Events) subscribe(clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	channel, ok := moduleChannels[req.Channel]
	if !ok {
		return nil, world.Errorf(world.ErrInvalid, "Unknown event channel: %s", req.Channel)
	}
	select {
	case <-e.ended:
		return nil, world.Errorf(world.ErrUnavailable, "The events of world %s are not available: the relay is shutting down", clientID)
	default:
	}
	s := &subscription{e: e, clientID: clientID, user: user, req: req, channel: channel,
		queue: make(chan world.Event, DefaultEventQueue), behind: make(chan struct{})}
	e.mu.Lock()
	w := e.world(clientID)
	s.start = w.seq
	if req.Resume {
		oldest := w.seq + 1
		if len(w.ring) > 0 {
			oldest = w.ring[0].Seq
		}
		if req.After > w.seq || req.After+1 < oldest {
			var o uint64
			if len(w.ring) > 0 {
				o = oldest
			}
			s.reset, s.isReset = world.EventReset{LastEventID: req.After, Oldest: o, Head: w.seq}, true
		} else {
			for i := range w.ring {
				if le := &w.ring[i]; le.Seq > req.After {
					if ev, ok := s.view(le); ok {
						s.replay = append(s.replay, ev)
					}
				}
			}
		}
	}
	w.subs[s] = struct{}{}
	n := 0
	for other := range w.subs {
		if other.channel == channel {
			n++
		}
	}
	e.mu.Unlock()
	if e.hub != nil {
		_ = e.hub.SetChannel(clientID, channel, n)
	}
	return s, nil
}

// subscription is one subscriber of a linked world's events.
type subscription struct {
	e        *Events
	clientID string
	user     *world.User
	req      world.EventRequest
	channel  string

	start   uint64
	reset   world.EventReset
	isReset bool
	replay  []world.Event

	queue chan world.Event
	// queued is the size of the payloads in queue: a subscriber whose
	// waiting events pass the ring's byte budget falls behind.
	queued    atomic.Int64
	behind    chan struct{} // closed when the queue overflowed
	fell      bool          // behind was closed; e.mu guards it
	closeOnce sync.Once
}

// offer queues le when the subscriber wants it; e.mu is held.
func (s *subscription) offer(le linkedEvent) {
	if s.fell {
		return
	}
	ev, ok := s.view(&le)
	if !ok {
		return
	}
	size := int64(len(ev.Data))
	if n := s.queued.Load(); n > 0 && n+size > s.e.limits.RingBytes {
		s.fall()
		return
	}
	select {
	case s.queue <- ev:
		s.queued.Add(size)
	default:
		s.fall()
	}
}

// fall ends the subscription with ErrSubscriberBehind; e.mu is held.
func (s *subscription) fall() {
	if !s.fell {
		s.fell = true
		close(s.behind)
	}
}

// view returns the event as the subscriber receives it, when its channel,
// filters and read rules let it through.
func (s *subscription) view(le *linkedEvent) (world.Event, bool) {
	if !s.wants(le) {
		return world.Event{}, false
	}
	data, undecided := le.viewFor(s.user)
	if undecided {
		s.e.undecided.Add(1)
	}
	if data == nil {
		return world.Event{}, false
	}
	return world.Event{Seq: le.Seq, Name: le.Name, Data: data}, true
}

// wants applies the subscription's channel and filters.
func (s *subscription) wants(le *linkedEvent) bool {
	if moduleChannels[le.channel] != s.channel {
		return false
	}
	switch le.channel {
	case world.ChannelHooks:
		if len(s.req.Hooks) > 0 && !contains(s.req.Hooks, le.filter) {
			return false
		}
	case world.ChannelCombat:
		if id := strings.TrimPrefix(s.req.EncounterID, "Combat."); id != "" && id != le.filter {
			return false
		}
	case world.ChannelActor:
		if u := s.req.ActorUUID; u != "" && u != le.filter && "Actor."+u != le.filter {
			return false
		}
	case world.ChannelScene:
		if id := strings.TrimPrefix(s.req.SceneID, "Scene."); id != "" && id != le.filter {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// EventStats counts what the linked worlds' event streams did since the
// relay started.
type EventStats struct {
	// Undecided counts the deliveries withheld from subscribers who are
	// not GMs because the relay could not tell whether they may read the
	// event (see Undecided).
	Undecided uint64
	// Fetched counts the documents the relay asked the modules for: to
	// decide who may read an event, or to complete a combat event.
	Fetched uint64
	// Dropped counts the event messages dropped because DefaultEventInbox
	// of a world's messages already waited, or twice its InboxBytes while
	// the relay waited for the world.
	Dropped uint64
	// Oversized counts the event messages dropped because they were
	// larger than MaxEventBytes or nested deeper than MaxDepth.
	Oversized uint64
	// JournalErrors counts the failures to store or load events.
	JournalErrors uint64
}

// Stats returns the counters.
func (e *Events) Stats() EventStats {
	return EventStats{Undecided: e.undecided.Load(), Fetched: e.fetched.Load(), Dropped: e.dropped.Load(), Oversized: e.oversized.Load(), JournalErrors: e.journalErrors.Load()}
}

// Undecided counts the deliveries of linked worlds' events left out
// because the relay could not tell whether the subscriber, not a GM, may
// read them (the module said nothing of the document's ownership and the
// relay had not seen it).
func (e *Events) Undecided() uint64 { return e.undecided.Load() }

// Reset implements [world.EventSubscription].
func (s *subscription) Reset() (world.EventReset, bool) { return s.reset, s.isReset }

// Replay implements [world.EventSubscription].
func (s *subscription) Replay() []world.Event { return s.replay }

// Start implements [world.EventSubscription].
func (s *subscription) Start() uint64 { return s.start }

// Next implements [world.EventSubscription].
func (s *subscription) Next(ctx context.Context) (world.Event, error) {
	select {
	case ev := <-s.queue:
		s.queued.Add(-int64(len(ev.Data)))
		return ev, nil
	default:
	}
	select {
	case ev := <-s.queue:
		s.queued.Add(-int64(len(ev.Data)))
		return ev, nil
	case <-s.behind:
		return world.Event{}, world.ErrSubscriberBehind
	case <-s.e.ended:
		return world.Event{}, world.ErrSubscriptionEnded
	case <-ctx.Done():
		return world.Event{}, ctx.Err()
	}
}

// Close implements [world.EventSubscription]: the last subscriber of a
// channel turns it off in the module.
func (s *subscription) Close() {
	s.closeOnce.Do(func() {
		e := s.e
		e.mu.Lock()
		w := e.world(s.clientID)
		delete(w.subs, s)
		n := 0
		for other := range w.subs {
			if other.channel == s.channel {
				n++
			}
		}
		e.mu.Unlock()
		if e.hub != nil {
			_ = e.hub.SetChannel(s.clientID, s.channel, n)
		}
	})
}
