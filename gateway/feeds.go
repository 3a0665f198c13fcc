package gateway

import (
	"context"
	"errors"
	"time"
)

// EventFeeds lets the SSE bridge take over, inside this process, the event
// subscriptions that the event RPC opened: once the RPC has run (every
// interceptor, the stream limits, its `connected` message), the bridge reads
// the subscription's events directly and writes each batch with one write,
// instead of receiving every event as a gRPC message through the in-process
// connection. That cuts the CPU of fan-out by about a third.
//
// The gateway knows nothing of worlds: the relay's wiring (cmd/relay)
// provides an implementation over the event hub. Without one, every event
// arrives through the RPC.
type EventFeeds interface {
	// HandoffKey is the request metadata key that asks the event RPC for a
	// handoff, and the response header that names the handoff's token.
	HandoffKey() string
	// Secret is the value sent under HandoffKey. It never leaves the
	// process, so no outside caller can ask for a handoff.
	Secret() string
	// Claim takes over the subscription handed over under token; nil when
	// there is none (it was claimed already, or the token is unknown).
	Claim(token string) EventFeed
}

// EventFeed is a subscription handed over to the bridge.
type EventFeed interface {
	// Backlog returns the events to write before the live ones: a reset
	// notice or the replayed events of a resume.
	Backlog() []FeedEvent
	// Last is the resume point after the backlog.
	Last() uint64
	// Next waits for events and returns every one waiting, appended to
	// buf[:0]. It returns an empty batch when tick fires first, and
	// ErrFeedOverflow when the subscriber fell too far behind.
	Next(ctx context.Context, tick <-chan time.Time, buf []FeedEvent) ([]FeedEvent, error)
	// Overflow is the final event for a subscriber that fell behind, given
	// the last event it was sent.
	Overflow(last uint64) FeedEvent
	// Release closes the subscription and frees its place in the stream
	// limits; the bridge calls it once, when the stream ends.
	Release()
}

// FeedEvent is one event of a feed.
type FeedEvent struct {
	Seq  uint64
	Name string
	Data []byte // one JSON value
	// Frame, when set, is the event's whole SSE frame as AppendEventFrame
	// builds it, shared with the other streams sending the same event and
	// payload: the bridge copies it instead of encoding the event again.
	// It must not be changed.
	Frame []byte
}

// AppendEventFrame appends an event's SSE frame to dst: `id:` (when it has
// a sequence), `event:` and one line of `data:`; an unreadable payload
// becomes an empty object. A feed may build each event's frame with it
// once and share it (FeedEvent.Frame).
func AppendEventFrame(dst []byte, ev FeedEvent) []byte { return appendFrame(dst, ev) }

// ErrFeedOverflow reports that a feed's subscriber fell behind its queue.
var ErrFeedOverflow = errors.New("gateway: event feed overflowed")
