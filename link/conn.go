package link

import (
	"context"
	"encoding/json"
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
}

// reply is what a waiting request receives: the module's message or the
// reason there is none.
type reply struct {
	msg json.RawMessage
	err error
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

	out  chan []byte
	done chan struct{} // closed by shut
	// ctx ends the reads and writes once the close handshake is over.
	ctx    context.Context
	cancel context.CancelFunc

	lastSeen atomic.Int64 // Unix nanoseconds

	mu      sync.Mutex
	closed  bool
	pending map[string]pendingCall
	info    ConnInfo

	shutOnce sync.Once
}

// newConn wraps an authenticated socket.
func newConn(h *Hub, ws *websocket.Conn, clientID string, token Hash, addr string, info ConnInfo) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &Conn{hub: h, ws: ws, clientID: clientID, token: token, addr: addr,
		out: make(chan []byte, h.opts.SendQueue), done: make(chan struct{}), ctx: ctx, cancel: cancel,
		pending: map[string]pendingCall{}, info: info}
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
func (c *Conn) enqueue(msg []byte) bool {
	select {
	case <-c.done:
		return false
	default:
	}
	select {
	case c.out <- msg:
		return true
	default:
		return false
	}
}

// call sends one request and waits for its reply (see Hub.Call).
func (c *Conn) call(ctx context.Context, requestType string, params any) (json.RawMessage, error) {
	h := c.hub
	id := h.nextRequestID(requestType)
	msg, err := encodeRequest(requestType, id, params)
	if err != nil {
		h.stats.failed.Add(1)
		return nil, err
	}
	ch := make(chan reply, 1)
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return nil, errConnClosed
	case len(c.pending) >= h.opts.MaxPending:
		c.mu.Unlock()
		h.stats.failed.Add(1)
		return nil, newCallError(ErrBusy, c.clientID, requestType, "too many requests in flight")
	}
	c.pending[id] = pendingCall{requestType: requestType, reply: ch}
	c.mu.Unlock()
	if !c.enqueue(msg) {
		if c.forget(id) {
			h.stats.failed.Add(1)
			return nil, newCallError(ErrBusy, c.clientID, requestType, "the tabletop is not reading its requests")
		}
		// The connection closed meanwhile and failed the request.
		r := <-ch
		return r.msg, r.err
	}
	timer := time.NewTimer(h.opts.ReplyTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.msg, r.err
	case <-timer.C:
		if !c.forget(id) {
			// The reply (or the disconnection) won the race.
			r := <-ch
			return r.msg, r.err
		}
		h.stats.timeouts.Add(1)
		return nil, newCallError(ErrTimeout, c.clientID, requestType, h.opts.ReplyTimeout.String())
	case <-ctx.Done():
		if !c.forget(id) {
			r := <-ch
			return r.msg, r.err
		}
		h.stats.failed.Add(1)
		return nil, ctx.Err()
	}
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

// deliver hands a reply to its waiting request, or counts it as late.
func (c *Conn) deliver(id string, msg json.RawMessage) {
	c.mu.Lock()
	p, ok := c.pending[id]
	delete(c.pending, id)
	c.mu.Unlock()
	if !ok {
		c.hub.stats.late.Add(1)
		c.hub.opts.Log.Debug("dropped a reply no request waits for", "clientId", c.clientID, "requestId", id)
		return
	}
	c.hub.stats.replies.Add(1)
	p.reply <- reply{msg: msg}
}

// shut ends the connection: it fails every waiting request at once,
// forgets the connection in the hub, and closes the socket with the code
// and reason (the close handshake runs in the background).
func (c *Conn) shut(code StatusCode, reason string) {
	c.shutOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		pending := c.pending
		c.pending = nil
		c.mu.Unlock()
		close(c.done)
		for _, p := range pending {
			c.hub.stats.failed.Add(1)
			p.reply <- reply{err: newCallError(ErrDisconnected, c.clientID, p.requestType, "")}
		}
		current := c.hub.detach(c)
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
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			code, reason := CloseGoingAway, "Connection lost"
			if websocket.CloseStatus(err) == CloseTooBig {
				code, reason = CloseTooBig, "Message too big"
			}
			c.shut(code, reason)
			return
		}
		c.touch()
		if typ != websocket.MessageText {
			c.hub.stats.ignored.Add(1)
			continue
		}
		c.dispatch(data)
	}
}

// writeLoop writes queued messages, one at a time, each within the write
// time-out; a module that does not read is disconnected.
func (c *Conn) writeLoop() {
	for {
		select {
		case <-c.done:
			return
		case msg := <-c.out:
			ctx, cancel := context.WithTimeout(c.ctx, c.hub.opts.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, msg)
			cancel()
			if err != nil {
				c.shut(CloseGoingAway, "Write failed")
				return
			}
		}
	}
}

// pingLoop sends WebSocket pings; one without a pong within the interval
// means the peer is gone.
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
			err := c.ws.Ping(ctx)
			cancel()
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

// dispatch handles one message from the module.
func (c *Conn) dispatch(data []byte) {
	var h header
	if err := json.Unmarshal(data, &h); err != nil || h.Type == "" {
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
			fn(c.clientID, Event{Type: h.Type, Message: data})
		}
	default:
		if id := h.requestID(); id != "" {
			c.deliver(id, data)
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
