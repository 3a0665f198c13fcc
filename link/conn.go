package link

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// ConnInfo describes a live connection: what the module said of its world
// when it connected (the connection's query parameters), its users, and
// when the relay heard from it.
type ConnInfo struct {
	// ClientID is the relay's id of the world.
	ClientID string
	// WorldID and WorldTitle are the tabletop's id and title of the world.
	WorldID, WorldTitle string
	// FoundryVersion is the tabletop's version.
	FoundryVersion string
	// SystemID, SystemTitle and SystemVersion describe the game system.
	SystemID, SystemTitle, SystemVersion string
	// CustomName is the name the game master gave the connection, if any.
	CustomName string
	// PublicURL is the tabletop's address, from the browser's Origin.
	PublicURL string
	// RemoteAddr is the module's address as the relay sees it.
	RemoteAddr string
	// ConnectedAt is when the module authenticated; LastSeen when the
	// relay last received anything from it (a message or a pong).
	ConnectedAt, LastSeen time.Time
	// Players are the world's users from the module's last `player-list`
	// (nil until one arrives).
	Players []Player
}

// pendingCall is a request waiting for its reply.
type pendingCall struct {
	requestType string
	reply       chan reply
	// largeReply exempts the reply from the reply limits and budget (a
	// file download).
	largeReply bool
}

// reply is what a waiting request receives: the module's message or the
// reason there is none. A message larger than chunkMax comes as large
// (msg is then nil), so that a caller that can read it in pieces (a file
// download) does not need it joined.
type reply struct {
	msg   json.RawMessage
	large *chunks
	err   error
	// fields are msg's top-level members and depth its nesting, when the
	// reader scanned it (see Conn.dispatch); nil for a large reply, which
	// is read in pieces and scanned by its caller.
	fields moduleReply
	depth  int
	// held is what the reply holds of its connection's reply budget,
	// given back by release.
	held *budgetHold
}

// release gives back what the reply holds of the reply budget; the
// caller calls it once done with the reply's bytes. It may be called more
// than once.
func (r reply) release() { r.held.release() }

// size is the reply's length in bytes.
func (r reply) size() int64 {
	if r.large != nil {
		return int64(r.large.Len())
	}
	return int64(len(r.msg))
}

// joined returns the reply's message in one slice.
func (r reply) joined() json.RawMessage {
	if r.large != nil {
		return r.large.Bytes()
	}
	return r.msg
}

// outgoing is a message for the writer: head, then (for a large request)
// body and tail, written as one WebSocket message without joining them.
type outgoing struct {
	head []byte
	body *chunks
	tail []byte
}

// Conn is one authenticated module connection. Three goroutines serve it:
// the reader (dispatching replies, events and the module's other
// messages), the writer (the only one writing messages, from a bounded
// queue, each within the write time-out) and the pinger.
type Conn struct {
	hub      *Hub
	ws       *websocket.Conn
	clientID string
	token    Hash
	addr     string // the host part of the remote address

	out  chan outgoing
	done chan struct{} // closed by shut
	// ctx ends the reads and writes once the close handshake is over.
	ctx    context.Context
	cancel context.CancelFunc

	lastSeen atomic.Int64 // Unix nanoseconds
	// readerHeld is set while the socket's reader waits for the world's
	// earlier events to be processed (see handEvent).
	readerHeld atomic.Bool
	// messagesRead counts the messages read from the socket, so that the
	// ping loop can tell a silent peer from a busy one.
	messagesRead atomic.Int64

	mu      sync.Mutex
	closed  bool
	pending map[string]pendingCall
	info    ConnInfo

	// replies is the world's reply budget (HubOptions.ReplyBudget).
	replies byteBudget

	shutOnce sync.Once
}

// newConn wraps an authenticated socket.
func newConn(h *Hub, ws *websocket.Conn, clientID string, token Hash, addr string, info ConnInfo) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{hub: h, ws: ws, clientID: clientID, token: token, addr: addr,
		out: make(chan outgoing, h.opts.SendQueue), done: make(chan struct{}), ctx: ctx, cancel: cancel,
		pending: map[string]pendingCall{}, info: info}
	c.replies.init(h.opts.ReplyBudget)
	c.touch()
	return c
}

// Info describes the connection.
func (c *Conn) Info() ConnInfo {
	c.mu.Lock()
	info := c.info
	info.Players = slices.Clone(c.info.Players)
	c.mu.Unlock()
	info.LastSeen = time.Unix(0, c.lastSeen.Load())
	return info
}

// touch records that the module was heard from.
func (c *Conn) touch() { c.lastSeen.Store(c.hub.opts.Now().UnixNano()) }

// enqueue queues a message for the writer without waiting; it reports
// false when the connection is closed or its queue is full.
func (c *Conn) enqueue(msg []byte) bool { return c.enqueueOut(outgoing{head: msg}) }

// enqueueOut is enqueue for any outgoing message.
func (c *Conn) enqueueOut(o outgoing) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- o:
		return true
	default:
		return false
	}
}

// callWith sends one request and waits for its reply. When value is not
// nil it is the JSON value of the request's field named field, written to
// the socket from where it is (see Hub.callLarge). largeReply exempts the
// reply from the reply limits and budget; any other reply must be
// released once used.
func (c *Conn) callWith(ctx context.Context, requestType string, params any, field string, value *chunks, largeReply bool) reply {
	h := c.hub
	id := h.nextRequestID(requestType)
	msg, err := encodeRequest(requestType, id, params)
	if err != nil {
		h.stats.failed.Add(1)
		return reply{err: err}
	}
	out := outgoing{head: msg}
	if value != nil {
		// The value goes last: `{…,"field":<value>}`.
		head := append(msg[:len(msg)-1:len(msg)-1], ',')
		head = append(head, quoteKey(field)...)
		out = outgoing{head: append(head, ':'), body: value, tail: []byte{'}'}}
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return reply{err: errConnClosed}
	case len(c.pending) >= h.opts.MaxPending:
		c.mu.Unlock()
		h.stats.failed.Add(1)
		return reply{err: newCallError(ErrBusy, c.clientID, requestType, "too many requests in flight")}
	}
	c.pending[id] = pendingCall{requestType: requestType, reply: ch, largeReply: largeReply}
	c.mu.Unlock()
	if !c.enqueueOut(out) {
		if c.forget(id) {
			h.stats.failed.Add(1)
			return reply{err: newCallError(ErrBusy, c.clientID, requestType, "the tabletop is not reading its requests")}
		}
		// The connection closed meanwhile and failed the request.
		return <-ch
	}
	timer := time.NewTimer(h.opts.ReplyTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r
	case <-timer.C:
		if !c.forget(id) {
			// The reply (or the disconnection) won the race.
			return <-ch
		}
		h.stats.timeouts.Add(1)
		return reply{err: newCallError(ErrTimeout, c.clientID, requestType, h.opts.ReplyTimeout.String())}
	case <-ctx.Done():
		if !c.forget(id) {
			return <-ch
		}
		h.stats.failed.Add(1)
		return reply{err: ctx.Err()}
	}
}

// quoteKey returns a JSON object key, quoted.
func quoteKey(k string) []byte {
	b, _ := json.Marshal(k)
	return b
}

// forget removes a waiting request and reports whether it was waiting.
func (c *Conn) forget(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pending[id]; !ok {
		return false
	}
	delete(c.pending, id)
	return true
}

// deliver hands a reply the reader scanned to its waiting request, or
// counts it as late.
func (c *Conn) deliver(id string, msg json.RawMessage, fields moduleReply, depth int) {
	c.deliverReply(id, reply{msg: msg, fields: fields, depth: depth})
}

// deliverReply hands any reply to its waiting request, or counts it as
// late.
func (c *Conn) deliverReply(id string, r reply) {
	c.mu.Lock()
	p, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		c.hub.stats.late.Add(1)
		c.hub.opts.Log.Debug("dropped a reply no request waits for", "clientId", c.clientID, "requestId", id)
		return
	}
	if !p.largeReply {
		r = c.bound(p, r)
	}
	if r.err == nil {
		c.hub.stats.replies.Add(1)
	}
	p.reply <- r
}

// bound applies the reply limits to an ordinary reply: a reply larger than
// MaxReplyBytes or nested deeper than MaxDepth (with its envelope) becomes its request's
// error. An accepted reply takes its size from the world's reply budget,
// waiting (and so holding up the socket's reader) while the replies read
// before it are being decoded.
func (c *Conn) bound(p pendingCall, r reply) reply {
	opts := &c.hub.opts
	if n := r.size(); n > opts.MaxReplyBytes {
		return c.tooLarge(p, n)
	}
	msg := r.joined()
	limit := opts.MaxDepth + envelopeDepth
	deep := r.depth > limit
	if r.fields == nil {
		deep = tooDeep(msg, limit)
	}
	if deep {
		c.hub.stats.refused.Add(1)
		c.hub.opts.Log.Warn("refused a linked world's reply nested deeper than the limit", "clientId", c.clientID, "request", p.requestType, "limit", limit)
		return reply{err: newCallError(ErrReplyRefused, c.clientID, p.requestType, fmt.Sprintf("nested deeper than the limit of %d levels", limit))}
	}
	held := c.replies.acquire(int64(len(msg)))
	return reply{msg: msg, fields: r.fields, held: held}
}

// tooLarge is the failure of a request whose reply had size bytes, over
// MaxReplyBytes.
func (c *Conn) tooLarge(p pendingCall, size int64) reply {
	limit := c.hub.opts.MaxReplyBytes
	c.hub.stats.refused.Add(1)
	c.hub.opts.Log.Warn("refused a linked world's reply larger than the limit", "clientId", c.clientID, "request", p.requestType, "bytes", size, "limit", limit)
	return reply{err: newCallError(ErrReplyRefused, c.clientID, p.requestType, fmt.Sprintf("%d bytes, more than the limit of %d", size, limit))}
}

// refuseReply fails the request waiting for a reply that was read into
// nothing for its size, or counts the reply as late.
func (c *Conn) refuseReply(id string, size int64) {
	c.mu.Lock()
	p, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		c.hub.stats.late.Add(1)
		return
	}
	p.reply <- c.tooLarge(p, size)
}

// shut ends the connection: it forgets the connection in the hub, fails
// every waiting request at once, and closes the socket with the code
// and reason (the close handshake runs in the background).
func (c *Conn) shut(code StatusCode, reason string) {
	c.shutOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()
		close(c.done)
		c.replies.close()
		// The hub forgets the connection before the waiting requests
		// fail, so a caller told that the world disconnected never finds
		// it online afterwards.
		current := c.hub.detach(c)
		for _, p := range pending {
			c.hub.stats.failed.Add(1)
			p.reply <- reply{err: newCallError(ErrDisconnected, c.clientID, p.requestType, "")}
		}
		c.hub.closeSocket(c, code, reason)
		c.hub.opts.Log.Info("linked world disconnected", "clientId", c.clientID, "code", int(code), "reason", reason)
		if current && c.hub.opts.OnDisconnect != nil {
			c.hub.opts.OnDisconnect(c.clientID)
		}
	})
}

// start starts the writer and the pinger.
func (c *Conn) start() {
	go c.writeLoop()
	go c.pingLoop()
}

// read serves the module's messages until the connection closes.
func (c *Conn) read() {
	c.ws.SetReadLimit(c.hub.opts.MaxMessageBytes)
	for {
		typ, msg, dropped, err := c.readMessage()
		if err != nil {
			code, reason := CloseGoingAway, "Connection lost"
			if websocket.CloseStatus(err) == CloseTooBig {
				code, reason = CloseTooBig, "Message too big"
			}
			c.shut(code, reason)
			return
		}
		c.touch()
		c.messagesRead.Add(1)
		if typ != websocket.MessageText {
			c.hub.stats.ignored.Add(1)
			continue
		}
		if dropped > 0 {
			c.dispatchDropped(msg, dropped)
			continue
		}
		if msg.Len() > chunkMax && c.dispatchLarge(msg) {
			continue
		}
		c.dispatch(msg.Bytes())
	}
}

// readMessage reads the next message into pieces: a large one (a file
// download) is never copied into a growing slice. Only the reply to a file
// download may be larger than MaxReplyBytes and MaxEventBytes: unless a
// download waits for its reply, the rest of a message past that is read
// into nothing, and readMessage returns, instead of the message, what it
// was (see headScanner) with its whole length as dropped.
func (c *Conn) readMessage() (typ websocket.MessageType, msg *chunks, dropped int64, err error) {
	typ, r, err := c.ws.Reader(c.ctx)
	if err != nil {
		return 0, nil, 0, err
	}
	msg = &chunks{}
	keep := max(c.hub.opts.MaxReplyBytes, c.hub.opts.MaxEventBytes)
	if _, err := msg.ReadFrom(io.LimitReader(r, keep+1)); err != nil {
		return 0, nil, 0, err
	}
	if msg.Len() <= keep {
		return typ, msg, 0, nil
	}
	if c.awaitsLargeReply() {
		// The message may be the download's reply, whatever the order of
		// its fields: it is read whole, within MaxMessageBytes.
		if _, err := msg.ReadFrom(r); err != nil {
			return 0, nil, 0, err
		}
		return typ, msg, 0, nil
	}
	var head headScanner
	_, _ = msg.WriteTo(&head)
	n, err := io.Copy(&head, r)
	if err != nil {
		return 0, nil, 0, err
	}
	kept := &chunks{}
	b, _ := json.Marshal(map[string]string{"type": head.typ, "requestId": head.id})
	kept.Write(b)
	return typ, kept, msg.Len() + n, nil
}

// messageHead returns the `type` and `requestId` of a message held in
// pieces, when they come before whatever the pieces cut off.
func messageHead(msg *chunks) (typ, id string) {
	_ = scanObject(msg, func(f field) bool {
		if f.isString && !f.escaped && (f.key == "type" || f.key == "requestId") {
			v := string(msg.copyOf(f.off+1, f.n-2))
			if f.key == "type" {
				typ = v
			} else {
				id = v
			}
		}
		return typ == "" || id == ""
	})
	return typ, id
}

// awaitsLargeReply reports whether a file download waits for its reply.
func (c *Conn) awaitsLargeReply() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.pending {
		if p.largeReply {
			return true
		}
	}
	return false
}

// dispatchDropped handles a message whose end was read into nothing for
// its size (see readMessage): an event is handed on without its content,
// to be counted as oversized; a reply fails its request; anything else is
// ignored.
func (c *Conn) dispatchDropped(head *chunks, size int64) {
	typ, id := messageHead(head)
	switch {
	case isEventType(typ):
		c.hub.stats.events.Add(1)
		if fn := c.hub.opts.OnEvent; fn != nil {
			c.handEvent(fn, Event{Type: typ, Size: size})
		}
	case id != "" && typ != typeRemote && typ != typePlayerList:
		c.refuseReply(id, size)
	default:
		c.hub.stats.ignored.Add(1)
	}
}

// dispatchLarge hands a large reply to its request as it is, in pieces,
// and reports whether msg was one; other large messages are dispatched
// joined.
func (c *Conn) dispatchLarge(msg *chunks) bool {
	typ, id := messageHead(msg)
	switch {
	case typ == "" || id == "", typ == typeRemote, typ == typePlayerList, isEventType(typ):
		return false
	}
	c.deliverReply(id, reply{large: msg})
	return true
}

// writeLoop writes queued messages, one at a time, each within the write
// time-out; a module that does not read is disconnected.
func (c *Conn) writeLoop() {
	for {
		select {
		case <-c.done:
			return
		case o := <-c.out:
			var err error
			if o.body == nil {
				ctx, cancel := context.WithTimeout(c.ctx, c.hub.opts.WriteTimeout)
				err = c.ws.Write(ctx, websocket.MessageText, o.head)
				cancel()
			} else {
				err = c.writeLarge(o)
			}
			if err != nil {
				c.shut(CloseGoingAway, "Write failed")
				return
			}
		}
	}
}

// writeLarge writes a large message in the pieces it is held in. The
// write time-out applies to each piece rather than to the whole: a module
// that reads on is given the time a large file takes, one that stops
// reading is cut off after the time-out.
func (c *Conn) writeLarge(o outgoing) error {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	stall := time.AfterFunc(c.hub.opts.WriteTimeout, cancel)
	defer stall.Stop()
	w, err := c.ws.Writer(ctx, websocket.MessageText)
	if err != nil {
		return err
	}
	pw := progressWriter{w: w, reset: func() { stall.Reset(c.hub.opts.WriteTimeout) }}
	if _, err := pw.Write(o.head); err != nil {
		return err
	}
	if _, err := o.body.WriteTo(pw); err != nil {
		return err
	}
	if _, err := pw.Write(o.tail); err != nil {
		return err
	}
	return w.Close()
}

// progressWriter calls reset after every write that went through.
type progressWriter struct {
	w     io.Writer
	reset func()
}

func (p progressWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err == nil {
		p.reset()
	}
	return n, err
}

// handEvent passes an event message on. The receiver may hold the
// socket's reader until the world's earlier events are processed
// (back-pressure); meanwhile the reader reads no pong, so the ping loop
// is told not to take the silence for a dead peer.
func (c *Conn) handEvent(fn func(clientID string, ev Event), ev Event) {
	c.readerHeld.Store(true)
	defer c.readerHeld.Store(false)
	fn(c.clientID, ev)
}

// pingLoop sends WebSocket pings; one without a pong within the interval
// means the peer is gone, unless a message from it arrived meanwhile or
// the reader is held by back-pressure: a pong cannot be read then, and
// the peer has just sent more than the relay could take.
func (c *Conn) pingLoop() {
	every := c.hub.opts.PingInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(c.ctx, every)
			readBefore := c.messagesRead.Load()
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil && (c.readerHeld.Load() || c.messagesRead.Load() != readBefore) {
				continue
			}
			if err != nil {
				c.shut(CloseGoingAway, "No answer to ping")
				return
			}
			c.touch()
		}
	}
}

// pongMessage answers the module's JSON ping.
var pongMessage = []byte(`{"type":"pong"}`)

// dispatch handles one message from the module. One pass over the
// message checks that it is JSON, measures its nesting and splits it into
// its top-level fields; a reply is handed over with them, so that neither
// the reply limits nor its caller read the message again.
func (c *Conn) dispatch(data []byte) {
	fields := moduleReply{}
	depth, ok := scanJSON(data, func(m member) bool {
		if m.key != "" {
			fields[m.key] = m.value
		}
		return true
	})
	h, isObject := header{RequestID: fields["requestId"]}, len(fields) > 0
	if ok && isObject {
		h.Type, ok = fields.text("type")
	}
	if !ok || h.Type == "" {
		c.hub.stats.ignored.Add(1)
		return
	}
	switch {
	case h.Type == typePing:
		c.enqueue(pongMessage)
	case h.Type == typePong || h.Type == typeAuth:
	case h.Type == typePlayerList:
		c.players(data)
	case h.Type == typeModuleNotify:
		c.hub.opts.Log.Info("linked world notice", "clientId", c.clientID, "message", string(truncate(data, 512)))
	case h.Type == typeRemote:
		c.refuseRemote(h.requestID())
	case isEventType(h.Type):
		c.hub.stats.events.Add(1)
		if fn := c.hub.opts.OnEvent; fn != nil {
			c.handEvent(fn, Event{Type: h.Type, Message: data})
		}
	default:
		if id := h.requestID(); id != "" {
			c.deliver(id, data, fields, depth)
			return
		}
		c.hub.stats.ignored.Add(1)
	}
}

// players records the world's users from a `player-list` message.
func (c *Conn) players(data []byte) {
	var msg struct {
		Users []Player `json:"users"`
	}
	if err := json.Unmarshal(data, &msg); err != nil {
		c.hub.stats.ignored.Add(1)
		return
	}
	if msg.Users == nil {
		msg.Users = []Player{}
	}
	c.mu.Lock()
	c.info.Players = msg.Users
	c.mu.Unlock()
}

// refuseRemote answers the module's cross-world tunnel request at once:
// this relay does not carry requests between worlds, and the module would
// otherwise wait a minute for nothing.
func (c *Conn) refuseRemote(requestID string) {
	if requestID == "" {
		return
	}
	b, _ := json.Marshal(map[string]any{"type": typeRemoteReply, "requestId": requestID, "success": false,
		"error": "This relay does not carry requests between worlds"})
	c.enqueue(b)
}

// truncate cuts b to n bytes for a log line.
func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
