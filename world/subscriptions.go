package world

import (
	"context"
	"encoding/json"
	"errors"
)

// The vocabulary of event subscriptions (the [Events] capability).

// EventChannel is what a subscription follows.
type EventChannel string

// The channels.
const (
	// ChannelHooks carries every change under the tabletop's hook names
	// (`createActor`, `updateItem`, `combatTurn`, ...).
	ChannelHooks EventChannel = "hooks"
	// ChannelCombat carries encounter events (`combat-start`,
	// `combat-turn`, ...).
	ChannelCombat EventChannel = "combat"
	// ChannelActor carries actor events (`actor-update`,
	// `actor-item-add`, ...).
	ChannelActor EventChannel = "actor"
	// ChannelScene carries scene events (`scene-update`,
	// `scene-token-create`, ...).
	ChannelScene EventChannel = "scene"
)

// EventRequest describes a subscription.
type EventRequest struct {
	Channel EventChannel
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
	// Seq is the event's sequence number in its world, from 1.
	Seq  uint64
	Name string
	// Data is the payload, one JSON value; shared, so never changed.
	Data json.RawMessage
}

// EventReset says that a resume asked for events the world no longer has
// (or never had): the subscriber missed events and should reload what it
// follows. Head is the sequence of the last event published; the stream
// goes live after it.
type EventReset struct {
	LastEventID uint64
	Oldest      uint64 // the oldest sequence retained; 0 when none is
	Head        uint64
}

// EventSubscription is one subscriber's view of a world's events: first a
// reset notice or the replayed events of a resume, then live events, with
// neither gap nor overlap.
type EventSubscription interface {
	// Reset reports whether the resume asked for was impossible, and why.
	Reset() (EventReset, bool)
	// Replay returns the retained events after the resume point that the
	// subscriber may see, oldest first.
	Replay() []Event
	// Start is the sequence after which live events begin.
	Start() uint64
	// Next waits for the next live event. It fails with
	// ErrSubscriberBehind once the subscriber fell too far behind, with
	// ErrSubscriptionEnded when the world stops publishing, and with the
	// context's error.
	Next(ctx context.Context) (Event, error)
	// Close ends the subscription and releases it.
	Close()
}

// EventPusher is implemented by subscriptions whose live events can be
// written by a few writer goroutines shared by every subscription, rather
// than taken one by one with Next in a goroutine per subscriber: a stream
// whose transport can write without blocking (an SSE stream over HTTP/1.1)
// then costs no goroutine wake-up per event, and each write carries every
// event that waited.
type EventPusher interface {
	EventSubscription
	// Push hands every live event from now on to w instead of Next (the
	// reset notice and the replay are still the caller's to send first):
	// the events already waiting go to w at once. Call it once, and never
	// call Next afterwards.
	Push(w EventWriter)
	// Wait blocks until a pushed subscription ends: with
	// ErrSubscriberBehind once it fell too far behind (after w returned
	// from its last write), with ErrSubscriptionEnded when the world stops
	// publishing, or with the context's error.
	Wait(ctx context.Context) error
	// WhenDone is Wait without a goroutine waiting: it calls f once, in a
	// goroutine of its own, when the pushed subscription ends by itself,
	// with ErrSubscriberBehind once it fell too far behind (after w
	// returned from its last write) or ErrSubscriptionEnded when the world
	// stops publishing. f is never called once Close was. Call it once,
	// after Push.
	WhenDone(f func(error))
	// Last is the sequence of the last live event handed to w, or Start
	// when none was: where a subscriber that fell behind resumes.
	Last() uint64
	// Resume hands w the events that waited while w was finishing a
	// write in its own goroutine (see EventWriter).
	Resume()
}

// EventWriter writes a pushed subscription's live events (see
// EventPusher). WriteEvents is called by one goroutine at a time per
// subscription, with the events in order, and must not block: it writes
// what the connection takes at once and returns true, or keeps what it
// could not write, finishes writing it in a goroutine of its own and
// returns false. The subscription then hands it nothing more (events wait
// in its queue, which may overflow) until that goroutine calls the
// subscription's Resume. It must not keep evs after it returns.
type EventWriter interface {
	WriteEvents(evs []Event) bool
}

// Errors that end a subscription; they are not kinds of [Error], which
// answer calls: they tell a stream why it ends.
var (
	// ErrSubscriberBehind reports a subscriber that fell more than its
	// queue behind; it may resume from the last event it received.
	ErrSubscriberBehind = errors.New("events: subscriber fell behind")
	// ErrSubscriptionEnded reports that the world stopped publishing
	// events (the relay is shutting down).
	ErrSubscriptionEnded = errors.New("events: hub closed")
)
