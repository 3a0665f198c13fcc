package events

import (
	"crypto/rand"
	"crypto/subtle"
	"sync"
)

// A handoff lets the relay's own SSE bridge read a subscription's events
// directly once the event RPC has done its work (authentication, the
// interceptors, validation, the `connected` message), instead of receiving
// each event as a gRPC message through the in-process connection: the
// bridge then writes every batch of waiting events with one write and one
// flush, and fan-out to many subscribers costs a fraction of the CPU. The
// subscription, its filters and its user's read rules are the ones the RPC
// set up. Once claimed, the RPC ends, and the bridge owns the subscription
// and the stream limits it holds: it calls Release when its stream ends.
//
// Only a caller in the same process can ask for a handoff, by sending
// [HandoffSecret] (random per process) in the request metadata, and only a
// caller in the same process can claim one.

// Handoff is a subscription handed over by the event RPC to the caller in
// the same process that asked for it.
type Handoff struct {
	// Sub is the subscription; the RPC closes it when it ends.
	Sub *Subscription
	// Backlog are the events to send before the live ones: a reset notice
	// or the replayed events of a resume.
	Backlog []Event
	// Last is the resume point after the backlog: everything up to it was
	// handed over or filtered out.
	Last uint64
	// Overflow is the final event for a subscriber that fell behind, given
	// the last event it was sent.
	Overflow func(last uint64) Event
	// Release closes the subscription and frees what the stream held (its
	// place in the stream limits); the claimant calls it once, when done.
	Release func()

	claimed chan struct{}
}

// Claimed is closed once the handoff is claimed.
func (h *Handoff) Claimed() <-chan struct{} { return h.claimed }

// HandoffMetadata is the request metadata key carrying [HandoffSecret], and
// the response header carrying the handoff's token.
const HandoffMetadata = "x-relay-event-handoff"

var (
	handoffSecret = rand.Text()

	handoffMu sync.Mutex
	handoffs  = map[string]*Handoff{}
)

// HandoffSecret is the process's secret that asks an event RPC for a
// handoff; it never leaves the process.
func HandoffSecret() string { return handoffSecret }

// IsHandoffSecret reports whether s is the process's handoff secret.
func IsHandoffSecret(s string) bool {
	return subtle.ConstantTimeCompare([]byte(s), []byte(handoffSecret)) == 1
}

// Park keeps a handoff for its claimant and returns the token that claims
// it. The RPC drops it if it ends before the handoff is claimed.
func Park(h *Handoff) (token string) {
	token = rand.Text()
	h.claimed = make(chan struct{})
	handoffMu.Lock()
	handoffs[token] = h
	handoffMu.Unlock()
	return token
}

// Claim takes the handoff parked under token; nil when there is none (or
// it was claimed already).
func Claim(token string) *Handoff {
	handoffMu.Lock()
	defer handoffMu.Unlock()
	h := handoffs[token]
	if h != nil {
		delete(handoffs, token)
		close(h.claimed)
	}
	return h
}

// Drop forgets the handoff parked under token unless it was claimed; it
// reports whether it did (false: the claimant owns it).
func Drop(token string) bool {
	handoffMu.Lock()
	defer handoffMu.Unlock()
	if _, ok := handoffs[token]; !ok {
		return false
	}
	delete(handoffs, token)
	return true
}
