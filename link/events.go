package link

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// Defaults of the linked worlds' event streams.
const (
	// DefaultEventRetention is how many events of each linked world are
	// kept for resume.
	DefaultEventRetention = 1024
	// DefaultEventQueue is how many events a subscriber may fall behind
	// before its stream ends with world.ErrSubscriberBehind.
	DefaultEventQueue = 256
)

// Events turns the event messages of linked worlds into the relay's event
// streams: each world's events get their sequence numbers here (from 1,
// for as long as the relay runs), the last DefaultEventRetention are kept
// for resume, and each subscriber gets those of its channel that pass its
// filters and its read rules. While a module channel has subscribers it
// is turned on in the module ([Hub.SetChannel]), and off when the last
// leaves. Give [Events.Publish] to [HubOptions].OnEvent.
type Events struct {
	hub *Hub
	// published and continueFrom, when set, connect the events to the
	// other nodes of a cluster (see cluster.go).
	published    func(clientID string, records []world.JournalRecord)
	continueFrom func(clientID string) uint64
	via          func(ctx context.Context, clientID string, user *world.User, req world.EventRequest) (world.EventSubscription, error)

	mu     sync.Mutex
	worlds map[string]*worldEvents
}

// NewEvents returns the event streams of hub's worlds. hub may be set
// later, before the first subscription, with SetHub (the hub is built
// with Publish as its callback).
func NewEvents() *Events { return &Events{worlds: map[string]*worldEvents{}} }

// SetHub sets the hub whose channels subscriptions turn on.
func (e *Events) SetHub(h *Hub) { e.hub = h }

// worldEvents is one world's retained events and subscribers.
type worldEvents struct {
	// numbered is set once the world's numbering is known: at its first
	// event here, after asking continueFrom, or at its first Feed.
	numbered bool
	seq      uint64
	ring     []linkedEvent // the retained events, oldest first
	subs     map[*subscription]struct{}
}

// linkedEvent is one event with what the filters and read rules read.
type linkedEvent struct {
	world.Event
	channel world.EventChannel
	// filter is the value a subscription's filter compares (the hook
	// name, encounter id, actor uuid or scene id).
	filter string
	// ownership is the ownership map the payload carries, if any.
	ownership map[string]float64
}

// moduleChannels maps our channels to the module's.
var moduleChannels = map[world.EventChannel]string{
	world.ChannelHooks: "hooks", world.ChannelCombat: "combat-events",
	world.ChannelActor: "actor-events", world.ChannelScene: "scene-events",
}

// Publish takes one event message of a linked world (the hub's OnEvent
// callback). Messages of channels the relay does not stream (rolls and
// chat) and malformed ones are dropped.
func (e *Events) Publish(clientID string, ev Event) {
	le, ok := translate(ev)
	if !ok {
		return
	}
	e.number(clientID)
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.world(clientID)
	w.seq++
	le.Seq = w.seq
	e.keep(w, le)
	if e.published != nil {
		if data, err := json.Marshal(le.wire()); err == nil {
			e.published(clientID, []world.JournalRecord{{Seq: le.Seq, Data: data}})
		}
	}
}

// keep retains le and offers it to the subscribers; e.mu is held.
func (e *Events) keep(w *worldEvents, le linkedEvent) {
	w.ring = append(w.ring, le)
	if len(w.ring) > DefaultEventRetention {
		w.ring = w.ring[len(w.ring)-DefaultEventRetention:]
	}
	for s := range w.subs {
		s.offer(le)
	}
}

// world returns the world's state; e.mu is held.
func (e *Events) world(clientID string) *worldEvents {
	w := e.worlds[clientID]
	if w == nil {
		w = &worldEvents{subs: map[*subscription]struct{}{}}
		e.worlds[clientID] = w
	}
	return w
}

// translate reads a module event message (reference §7): its channel, our
// event name, the filter field the module nests under `data` (§7.7) and
// the ownership the payload carries.
func translate(ev Event) (linkedEvent, bool) {
	var outer struct {
		Data json.RawMessage `json:"data"`
	}
	var msg struct{ Data map[string]json.RawMessage }
	if json.Unmarshal(ev.Message, &outer) != nil || json.Unmarshal(outer.Data, &msg.Data) != nil || msg.Data == nil {
		return linkedEvent{}, false
	}
	str := func(key string) string {
		var s string
		_ = json.Unmarshal(msg.Data[key], &s)
		return s
	}
	// The payload is the module's `data`, as it sent it.
	le := linkedEvent{}
	le.Data = outer.Data
	switch ev.Type {
	case "hook-event":
		le.channel, le.Name, le.filter = world.ChannelHooks, str("hook"), str("hook")
		var args []map[string]json.RawMessage
		if json.Unmarshal(msg.Data["args"], &args) == nil && len(args) > 0 {
			_ = json.Unmarshal(args[0]["ownership"], &le.ownership)
		}
	case "combat-event":
		le.channel, le.Name, le.filter = world.ChannelCombat, "combat-"+str("eventType"), str("encounterId")
	case "actor-event":
		le.channel, le.Name, le.filter = world.ChannelActor, "actor-"+str("eventType"), str("actorUuid")
	case "scene-event":
		le.channel, le.Name, le.filter = world.ChannelScene, "scene-"+str("eventType"), str("sceneId")
	default:
		return linkedEvent{}, false
	}
	if le.Name == "" || strings.HasSuffix(le.Name, "-") {
		return linkedEvent{}, false
	}
	return le, true
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
			for _, le := range w.ring {
				if le.Seq > req.After && s.wants(le) {
					s.replay = append(s.replay, le.Event)
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

	queue     chan world.Event
	behind    chan struct{} // closed when the queue overflowed
	fell      bool          // behind was closed; e.mu guards it
	closeOnce sync.Once
}

// offer queues le when the subscriber wants it; e.mu is held.
func (s *subscription) offer(le linkedEvent) {
	if s.fell || !s.wants(le) {
		return
	}
	select {
	case s.queue <- le.Event:
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

// wants applies the subscription's channel, filters and read rules.
func (s *subscription) wants(le linkedEvent) bool {
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
	return s.mayRead(le)
}

// mayRead applies the read rules: a GM reads every event; anyone else
// only an event whose payload carries the document's ownership and grants
// the user at least OBSERVER. The module does not filter by permission,
// and an event without ownership cannot be decided, so a non-GM does not
// get it.
func (s *subscription) mayRead(le linkedEvent) bool {
	if s.user.IsGM() {
		return true
	}
	if le.ownership == nil {
		return false
	}
	level, ok := le.ownership[s.user.ID]
	if !ok {
		level = le.ownership["default"]
	}
	return world.Level(level) >= world.LevelObserver
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

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
		return ev, nil
	default:
	}
	select {
	case ev := <-s.queue:
		return ev, nil
	case <-s.behind:
		return world.Event{}, world.ErrSubscriberBehind
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
