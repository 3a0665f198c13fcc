package link

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// Defaults of [HubOptions].
const (
	DefaultReplyTimeout    = 10 * time.Second
	DefaultPingInterval    = 20 * time.Second
	DefaultWriteTimeout    = 10 * time.Second
	DefaultMaxMessageBytes = 96 << 20
	DefaultMaxPending      = 1024
	DefaultSendQueue       = 256
	// DefaultMaxReplyBytes bounds a reply other than a file download:
	// twice the largest document an embedded world stores
	// (world.DefaultMaxDocumentBytes), room for a document in its
	// envelope, escaped.
	DefaultMaxReplyBytes = 4 << 20
	// DefaultReplyBudget bounds the replies of one world that were read
	// and are being decoded by their callers: four of the largest at once.
	DefaultReplyBudget    = 4 * DefaultMaxReplyBytes
	DefaultDuplicateProbe = 5 * time.Second
)

// HubOptions configure the live connections. Zero values take the defaults.
type HubOptions struct {
	// ReplyTimeout is how long [Hub.Call] waits for a reply.
	ReplyTimeout time.Duration
	// PingInterval is how often the relay sends a WebSocket ping to each
	// module; a ping not answered within the interval closes the
	// connection as dead (1001), which fails its requests at once.
	PingInterval time.Duration
	// WriteTimeout bounds the sending of one message: a module that does
	// not read for this long is disconnected.
	WriteTimeout time.Duration
	// MaxMessageBytes bounds a message from an authenticated module; a
	// larger one closes the connection (1009). File downloads arrive as
	// one message holding the file as base64, so the default (96 MiB)
	// leaves room for a 64 MiB file.
	MaxMessageBytes int64
	// MaxReplyBytes bounds a reply to any request but a file download; a
	// larger one fails its request (ErrReplyRefused, 503) and the
	// connection goes on. DefaultMaxReplyBytes when 0.
	MaxReplyBytes int64
	// MaxEventBytes is the largest event message the reader keeps; the
	// rest of a larger one is read into nothing, and OnEvent receives it
	// without its Message (see Event.Size). DefaultMaxEventBytes when 0.
	// Together with MaxReplyBytes it bounds every message the reader
	// holds but a file download's reply.
	MaxEventBytes int64
	// MaxDepth is the deepest nesting of objects and arrays allowed in the
	// documents such a reply carries, as in the embedded worlds'
	// documents (world.Limits.MaxDepth); the reply may nest a few levels
	// more around them (envelopeDepth). A deeper one fails its request
	// alike. world.DefaultMaxDepth when 0.
	MaxDepth int
	// ReplyBudget bounds the bytes of one world's replies that were read
	// and not yet decoded by their callers (file downloads aside): while
	// it is spent, the world's socket is not read. At least
	// MaxReplyBytes; DefaultReplyBudget when 0.
	ReplyBudget int64
	// MaxPending bounds the requests in flight on one connection; more
	// fail at once with ErrBusy.
	MaxPending int
	// SendQueue bounds the messages waiting to be written to one module;
	// when it is full, requests fail at once with ErrBusy.
	SendQueue int
	// DuplicateProbe is how long a live connection has to answer a ping
	// when another connection arrives for the same world; without an answer
	// it is dropped as dead and the newcomer takes its place.
	DuplicateProbe time.Duration
	// AllChannels turns every event channel on in every module, whatever
	// the subscribers here: in a cluster, subscribers on other nodes
	// receive the events too (package cluster/eventbus), and this node
	// cannot count them.
	AllChannels bool
	// OnEvent receives every event message of every world (see EventTypes),
	// in the order the module sent them. It runs on the connection's
	// reading goroutine: it must not block.
	OnEvent func(clientID string, ev Event)
	// OnConnect is called after a world authenticated and became the
	// world's connection (it may call the world, but the connection's
	// replies are read only once it returns: a callback that waits for one
	// must do so in a goroutine); OnDisconnect when the world has no
	// connection any more. A connection replaced by a newer one of the
	// same world causes no OnDisconnect.
	OnConnect    func(info ConnInfo)
	OnDisconnect func(clientID string)
	// Log receives connection events; discarded when nil.
	Log *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// withDefaults fills in zero values.
func (o HubOptions) withDefaults() HubOptions {
	if o.ReplyTimeout <= 0 {
		o.ReplyTimeout = DefaultReplyTimeout
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if o.MaxPending <= 0 {
		o.MaxPending = DefaultMaxPending
	}
	if o.MaxReplyBytes <= 0 {
		o.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = DefaultMaxEventBytes
	}
	if o.MaxDepth <= 0 {
		o.MaxDepth = world.DefaultMaxDepth
	}
	if o.ReplyBudget <= 0 {
		o.ReplyBudget = DefaultReplyBudget
	}
	o.ReplyBudget = max(o.ReplyBudget, o.MaxReplyBytes)
	if o.SendQueue <= 0 {
		o.SendQueue = DefaultSendQueue
	}
	// The queue must hold auth-success and one update per channel, which
	// a new connection queues before it starts writing.
	o.SendQueue = max(o.SendQueue, len(Channels)+1)
	if o.DuplicateProbe <= 0 {
		o.DuplicateProbe = DefaultDuplicateProbe
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Hub is the registry of live module connections: at most one per world.
// It sends requests and matches their replies ([Hub.Call]), hands event
// messages to OnEvent, keeps each world's users from its `player-list`, and
// tells each module which event channels to turn on ([Hub.SetChannel]).
// A Hub is safe for concurrent use.
type Hub struct {
	opts HubOptions

	mu    sync.Mutex
	conns map[string]*Conn
	subs  map[string]map[string]int // clientId → channel → subscribers
	// seen keeps when each world that disconnected was last heard from.
	seen   map[string]time.Time
	closed bool
	// handshakes counts the close handshakes still running; drained,
	// when not nil, is closed when it drops to zero (for Close).
	handshakes int
	drained    chan struct{}

	seq   atomic.Uint64 // request ids, unique in this process
	stats struct {
		calls, replies, timeouts, late, failed, events, ignored, refused atomic.Uint64
	}
}

// NewHub returns an empty hub.
func NewHub(opts HubOptions) *Hub {
	return &Hub{opts: opts.withDefaults(), conns: map[string]*Conn{}, subs: map[string]map[string]int{}, seen: map[string]time.Time{}}
}

// Stats counts what a hub did since it started.
type Stats struct {
	// Connected is the number of live connections.
	Connected int
	// Pending is the number of requests waiting for their reply, over
	// every connection.
	Pending int
	// Calls is the number of requests sent or refused; Replies those
	// answered in time; Timeouts those that were not; Failed those that
	// failed because their connection closed or was full.
	Calls, Replies, Timeouts, Failed uint64
	// LateReplies counts replies that matched no waiting request: they
	// came after their request timed out or was cancelled, or carried an
	// id the relay never sent. They are dropped.
	LateReplies uint64
	// Events counts event messages; Ignored messages of no known kind or
	// that were not JSON.
	Events, Ignored uint64
	// RefusedReplies counts the replies refused for their size or depth
	// (see HubOptions.MaxReplyBytes): their requests failed.
	RefusedReplies uint64
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	n := len(h.conns)
	conns := make([]*Conn, 0, n)
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	// Each connection's lock is taken apart from the hub's, which is never
	// held with it here.
	pending := 0
	for _, c := range conns {
		c.mu.Lock()
		pending += len(c.pending)
		c.mu.Unlock()
	}
	return Stats{
		Connected:      n,
		Pending:        pending,
		Calls:          h.stats.calls.Load(),
		Replies:        h.stats.replies.Load(),
		Timeouts:       h.stats.timeouts.Load(),
		Failed:         h.stats.failed.Load(),
		LateReplies:    h.stats.late.Load(),
		Events:         h.stats.events.Load(),
		Ignored:        h.stats.ignored.Load(),
		RefusedReplies: h.stats.refused.Load(),
	}
}

// conn returns the world's live connection, or nil.
func (h *Hub) conn(clientID string) *Conn {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.conns[clientID]
}

// Online reports whether the world has a live connection.
func (h *Hub) Online(clientID string) bool { return h.conn(clientID) != nil }

// Info describes the world's live connection.
func (h *Hub) Info(clientID string) (ConnInfo, bool) {
	c := h.conn(clientID)
	if c == nil {
		return ConnInfo{}, false
	}
	return c.Info(), true
}

// SystemID returns the game system the world's live connection reported
// (its `systemId`), "" when the world is not connected: a cheaper Info for
// the capability check made on every call.
func (h *Hub) SystemID(clientID string) string {
	c := h.conn(clientID)
	if c == nil {
		return ""
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info.SystemID
}

// Connected describes every live connection, in clientId order.
func (h *Hub) Connected() []ConnInfo {
	h.mu.Lock()
	conns := make([]*Conn, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	out := make([]ConnInfo, 0, len(conns))
	for _, c := range conns {
		out = append(out, c.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ClientID < out[j].ClientID })
	return out
}

// Call sends a request of type requestType to the world's module and
// returns the module's reply: the whole message, whatever its `type`, as
// the module sent it. params must encode as a JSON object (or be nil); its
// keys become the request's fields next to `type` and `requestId` (which
// params cannot replace). The requestId is unique in this process, so
// replies match their requests however many are in flight.
//
// A world without a live connection fails at once (ErrNotConnected); so
// does a connection with MaxPending requests in flight or a full send
// queue (ErrBusy). A connection that closes fails every waiting request at
// once (ErrDisconnected); no reply within the reply time-out is ErrTimeout,
// and the reply, if it comes later, is dropped and counted in
// Stats.LateReplies. ctx ends the wait early with its own error. Each of
// these errors is a *CallError.
func (h *Hub) Call(ctx context.Context, clientID, requestType string, params any) (json.RawMessage, error) {
	raw, _, release, err := h.callHeld(ctx, clientID, requestType, params)
	release()
	return raw, err
}

// callHeld is Call for a caller that decodes the reply before it lets go
// of the world's reply budget (HubOptions.ReplyBudget): it calls release
// once done with raw (release is never nil). fields are raw's top-level
// members when the connection's reader already split them (nil for a
// reply read in pieces).
func (h *Hub) callHeld(ctx context.Context, clientID, requestType string, params any) (raw json.RawMessage, fields moduleReply, release func(), err error) {
	h.stats.calls.Add(1)
	// A connection found just as a newer one replaced it refuses the
	// request before sending it; the newer one then takes it.
	for range 2 {
		c := h.conn(clientID)
		if c == nil {
			break
		}
		r := c.callWith(ctx, requestType, params, "", nil, false)
		if !errors.Is(r.err, errConnClosed) {
			if r.err != nil {
				return nil, nil, r.release, r.err
			}
			return r.joined(), r.fields, r.release, nil
		}
	}
	h.stats.failed.Add(1)
	return nil, nil, func() {}, newCallError(ErrNotConnected, clientID, requestType, "")
}

// callLarge is Call for the requests and replies that carry files. value,
// when not nil, is the JSON value of the request's field named field: it
// is written to the socket from the pieces it is held in, after params'
// fields, never joined into one message. A reply larger than chunkMax
// comes in pieces (reply.large), for the caller to read without joining
// it. largeReply exempts the reply from MaxReplyBytes and the reply
// budget (a file download, bounded by MaxMessageBytes); other replies
// hold the world's reply budget until the caller calls their release.
func (h *Hub) callLarge(ctx context.Context, clientID, requestType string, params any, field string, value *chunks, largeReply bool) reply {
	h.stats.calls.Add(1)
	for range 2 {
		c := h.conn(clientID)
		if c == nil {
			break
		}
		r := c.callWith(ctx, requestType, params, field, value, largeReply)
		if !errors.Is(r.err, errConnClosed) {
			return r
		}
	}
	h.stats.failed.Add(1)
	return reply{err: newCallError(ErrNotConnected, clientID, requestType, "")}
}

// nextRequestID returns a request id unique in this process.
func (h *Hub) nextRequestID(requestType string) string {
	return requestType + "_" + strconv.FormatUint(h.seq.Add(1), 10)
}

// encodeRequest builds a request message: type and requestId first, then
// params' fields in key order.
func encodeRequest(requestType, requestID string, params any) ([]byte, error) {
	var fields map[string]json.RawMessage
	if params != nil {
		raw, ok := params.(json.RawMessage)
		if !ok {
			var err error
			if raw, err = json.Marshal(params); err != nil {
				return nil, fmt.Errorf("link: encode %s request: %w", requestType, err)
			}
		}
		if !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
			if err := json.Unmarshal(raw, &fields); err != nil {
				return nil, fmt.Errorf("link: %s request parameters must be a JSON object: %w", requestType, err)
			}
		}
	}
	delete(fields, "type")
	delete(fields, "requestId")
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b bytes.Buffer
	b.WriteString(`{"type":`)
	writeJSONString(&b, requestType)
	b.WriteString(`,"requestId":`)
	writeJSONString(&b, requestID)
	for _, k := range keys {
		b.WriteByte(',')
		writeJSONString(&b, k)
		b.WriteByte(':')
		b.Write(fields[k])
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// writeJSONString writes s as a JSON string.
func writeJSONString(b *bytes.Buffer, s string) {
	q, _ := json.Marshal(s)
	b.Write(q)
}

// SetChannel records how many subscribers need the world's event channel
// (one of Channels) and, when the channel goes from none to some or back,
// tells the module to turn it on or off. Counts are kept for worlds that
// are not connected, and every channel with subscribers is turned on again
// when a world (re)connects.
func (h *Hub) SetChannel(clientID, channel string, count int) error {
	if !slices.Contains(Channels, channel) {
		return fmt.Errorf("link: unknown event channel %q", channel)
	}
	count = max(count, 0)
	if h.opts.AllChannels {
		count = max(count, 1)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.subs[clientID]
	prev := m[channel]
	if count == 0 {
		delete(m, channel)
		if len(m) == 0 {
			delete(h.subs, clientID)
		}
	} else {
		if m == nil {
			m = map[string]int{}
			h.subs[clientID] = m
		}
		m[channel] = count
	}
	if c := h.conns[clientID]; c != nil && (prev > 0) != (count > 0) {
		// A full queue means the module reads nothing; the ping will
		// drop it, and the reconnection sends every channel again.
		c.enqueue(subscriptionMessage(channel, count))
	}
	return nil
}

// Channel returns the subscriber count recorded for the world's channel.
func (h *Hub) Channel(clientID, channel string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.subs[clientID][channel]
}

// subscriptionMessage is an `event-subscription-update` message.
func subscriptionMessage(channel string, count int) []byte {
	b, _ := json.Marshal(struct {
		Type    string `json:"type"`
		Channel string `json:"channel"`
		Count   int    `json:"count"`
	}{typeSubscription, channel, count})
	return b
}

// errDuplicate refuses a connection while another live one serves the
// world; errClosed one that arrives while the hub is closing.
var (
	errDuplicate  = errors.New("Client ID already connected")
	errConnClosed = errors.New("connection closed")
	errClosed     = errors.New("Relay shutting down")
)

// attach makes c the world's connection. A newcomer replaces the current
// connection only when that one does not answer a ping within
// DuplicateProbe (the module reconnecting before the relay noticed its old
// socket die), which is then closed with 1001; while the current one
// answers, the newcomer is refused with errDuplicate (4004), from whatever
// address. The first live connection wins because the module that gets
// 4004 waits for it to go away and then takes over, while one closed with
// 1000 never comes back: two browsers of one world (or two tabs of one
// browser) never push each other out in turn, and the world stays online
// as long as one of them does.
//
// Before c becomes visible to Call, the channels with subscribers are
// queued behind its auth-success, so the module hears them first.
func (h *Hub) attach(c *Conn) error {
	for range 3 {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errClosed
		}
		old := h.conns[c.clientID]
		if old == nil {
			for _, ch := range Channels {
				n := h.subs[c.clientID][ch]
				if h.opts.AllChannels {
					n = max(n, 1)
				}
				if n > 0 {
					c.enqueue(subscriptionMessage(ch, n))
				}
			}
			h.conns[c.clientID] = c
			h.mu.Unlock()
			return nil
		}
		h.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), h.opts.DuplicateProbe)
		err := old.ws.Ping(ctx)
		cancel()
		if err == nil {
			return errDuplicate
		}
		old.shut(CloseGoingAway, "No answer to ping")
	}
	return errDuplicate
}

// detach forgets c if it is still its world's connection, and reports
// whether it was.
func (h *Hub) detach(c *Conn) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conns[c.clientID] != c {
		return false
	}
	delete(h.conns, c.clientID)
	h.seen[c.clientID] = time.Unix(0, c.lastSeen.Load())
	return true
}

// LastSeen returns when the relay last heard from the world: from its live
// connection, else from its last connection since the hub started (false
// when it has not connected since).
func (h *Hub) LastSeen(clientID string) (time.Time, bool) {
	if c := h.conn(clientID); c != nil {
		return time.Unix(0, c.lastSeen.Load()), true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	t, ok := h.seen[clientID]
	return t, ok
}

// Disconnect closes the world's live connection with the given close code
// and reason, failing its waiting requests at once, and reports whether
// there was one.
func (h *Hub) Disconnect(clientID string, code StatusCode, reason string) bool {
	c := h.conn(clientID)
	if c == nil {
		return false
	}
	c.shut(code, reason)
	return true
}

// Close closes every connection with 4005 (the modules reconnect later)
// and refuses new ones; it waits for the close handshakes until ctx ends.
func (h *Hub) Close(ctx context.Context) {
	h.mu.Lock()
	h.closed = true
	conns := make([]*Conn, 0, len(h.conns))
	for _, c := range h.conns {
		conns = append(conns, c)
	}
	h.mu.Unlock()
	for _, c := range conns {
		c.shut(CloseShutdown, errClosed.Error())
	}
	h.mu.Lock()
	if h.handshakes == 0 {
		h.mu.Unlock()
		return
	}
	if h.drained == nil {
		h.drained = make(chan struct{})
	}
	drained := h.drained
	h.mu.Unlock()
	select {
	case <-drained:
	case <-ctx.Done():
	}
}

// closeSocket runs a connection's close handshake in the background,
// counted for Close.
func (h *Hub) closeSocket(c *Conn, code StatusCode, reason string) {
	h.mu.Lock()
	h.handshakes++
	h.mu.Unlock()
	go func() {
		_ = c.ws.Close(code, reason)
		c.cancel()
		h.mu.Lock()
		h.handshakes--
		if h.handshakes == 0 && h.drained != nil {
			close(h.drained)
			h.drained = nil
		}
		h.mu.Unlock()
	}()
}
