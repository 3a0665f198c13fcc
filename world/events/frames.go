package events

import "sync/atomic"

// payloadView names one of an event's payloads: every subscriber given the
// same view receives the same bytes.
type payloadView int

const (
	viewFull    payloadView = iota // GMs, and readers of an event without a player payload
	viewPlayer                     // OBSERVER and OWNER readers when GM-only details were removed
	viewLimited                    // LIMITED readers
	numViews
)

// frameCache holds an event's encoded form for one payload view.
type frameCache struct {
	frame atomic.Pointer[[]byte]
}

// Frame returns build(ev), building it once per published event and
// payload: every subscriber receiving the same payload of the same event
// gets the same bytes, which must not be changed. Fan-out then encodes each
// event once per payload view (a GM's, a player's, a LIMITED reader's, and
// one per distinct set of embedded documents' parts removed, see
// event.variant) instead of once per subscriber.
//
// Every caller must build the same encoding (the relay's SSE frame): the
// first one built is the one kept. Events the hub did not publish (a reset
// notice, an overflow notice) are built on every call.
func (ev Event) Frame(build func(Event) []byte) []byte {
	if ev.frame == nil {
		return build(ev)
	}
	if p := ev.frame.frame.Load(); p != nil {
		return *p
	}
	b := build(ev)
	// Two subscribers may build at once; both results are the same bytes,
	// and the first stored is the one every later call returns.
	if ev.frame.frame.CompareAndSwap(nil, &b) {
		return b
	}
	return *ev.frame.frame.Load()
}
