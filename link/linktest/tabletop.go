// Package linktest simulates the tabletop side of a linked world: a
// [Tabletop] pairs with a relay and connects to it as the REST API module
// does (reference §1: pairing body, connection query, auth message,
// pings, close codes, reconnection with backoff), answers the relay's
// requests by type from a pluggable [Handler], and emits events. Tests use
// it to drive the relay's `/relay` endpoint; cmd/tabletop-sim runs one.
package linktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/tabletop-relay/relay/link"
)

// Request is one request from the relay.
type Request struct {
	// Type is the request type, such as `entity`.
	Type string
	// RequestID is the id the reply must echo.
	RequestID string
	// Message is the whole request as sent.
	Message json.RawMessage
}

// Params decodes the request's fields into v.
func (r Request) Params(v any) error { return json.Unmarshal(r.Message, v) }

// Handler answers a request. It returns the reply's fields (a map or a
// struct that encodes as a JSON object) and true, or false to send no
// reply at all, as the module does for a type it has no handler for. The
// reply gets `type` `<request type>-result` and the request's `requestId`
// unless the handler sets them. Each request runs in its own goroutine, so
// many are in flight at once; ctx ends when the connection does.
type Handler func(ctx context.Context, req Request) (reply any, ok bool)

// ByType returns a handler that answers each request type with its own
// handler, and sends no reply to the other types, as the module does.
func ByType(handlers map[string]Handler) Handler {
	return func(ctx context.Context, req Request) (any, bool) {
		h, ok := handlers[req.Type]
		if !ok {
			return nil, false
		}
		return h(ctx, req)
	}
}

// Config describes a simulated tabletop.
type Config struct {
	// RelayURL is the relay's address: http(s)://host:port, or the
	// module's ws(s):// form; a trailing /relay is accepted.
	RelayURL string
	// Origin is the tabletop's public address, sent as the Origin header
	// and at pairing as serverOrigin (default http://localhost:30000).
	Origin string
	// World metadata, sent at pairing and as the connection's query.
	WorldID, WorldTitle, FoundryVersion  string
	SystemID, SystemTitle, SystemVersion string
	CustomName                           string
	ServerFingerprint                    string
	// Players is sent as `player-list` after every authentication.
	Players []link.Player
	// Handler answers requests; nil answers none.
	Handler Handler
	// PingInterval is how often the tabletop sends its JSON ping (30 s by
	// default, as the module); negative sends none.
	PingInterval time.Duration
	// ReconnectBaseDelay, ReconnectMaxDelay and ReconnectMaxAttempts shape
	// reconnection as the module does: min(max, base × 2^(n-1)), at most
	// that many attempts (defaults 1 s, 30 s, 20).
	ReconnectBaseDelay   time.Duration
	ReconnectMaxDelay    time.Duration
	ReconnectMaxAttempts int
	// DeferredRetry is how long the tabletop waits after 4004 (another
	// connection serves the world) before it tries again (30 s).
	DeferredRetry time.Duration
	// LocalAddr, when set, is the IP address the tabletop connects from
	// (any 127.x.y.z works on a loopback relay): two tabletops with
	// different ones look like two machines to the relay.
	LocalAddr string
	// ReadBuffer, when not 0, is the size of the tabletop's socket receive
	// buffer in bytes (which also stops the system from growing it), so
	// that a frozen tabletop backs the relay up after little data.
	ReadBuffer int
	// Log receives what the tabletop does; discarded when nil.
	Log *slog.Logger
}

// Tabletop is a simulated tabletop module. Its methods are safe for
// concurrent use.
type Tabletop struct {
	cfg    Config
	client *http.Client

	mu        sync.Mutex
	clientID  string
	token     string
	ws        *websocket.Conn
	connCtx   context.Context
	channels  map[string]bool
	received  []json.RawMessage
	auths     int
	lastClose websocket.StatusCode
	frozen    chan struct{} // non-nil while the reader is held
	// beforeReply, when set, runs before each reply is sent (see
	// MirrorEvents).
	beforeReply func(context.Context)
	changed     chan struct{} // closed and replaced on every state change
	writeMu     sync.Mutex
}

// New returns a tabletop that has not paired yet.
func New(cfg Config) *Tabletop {
	if cfg.Origin == "" {
		cfg.Origin = "http://localhost:30000"
	}
	if cfg.PingInterval == 0 {
		cfg.PingInterval = 30 * time.Second
	}
	if cfg.ReconnectBaseDelay <= 0 {
		cfg.ReconnectBaseDelay = time.Second
	}
	if cfg.ReconnectMaxDelay <= 0 {
		cfg.ReconnectMaxDelay = 30 * time.Second
	}
	if cfg.ReconnectMaxAttempts <= 0 {
		cfg.ReconnectMaxAttempts = 20
	}
	if cfg.DeferredRetry <= 0 {
		cfg.DeferredRetry = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	t := &Tabletop{cfg: cfg, channels: map[string]bool{}, changed: make(chan struct{})}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	if cfg.LocalAddr != "" {
		dialer.LocalAddr = &net.TCPAddr{IP: net.ParseIP(cfg.LocalAddr)}
	}
	t.client = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if tc, ok := c.(*net.TCPConn); ok && cfg.ReadBuffer > 0 {
				_ = tc.SetReadBuffer(cfg.ReadBuffer)
			}
			return &gateConn{Conn: c, t: t, closed: make(chan struct{})}, nil
		},
		MaxIdleConns: 1,
	}, Timeout: 0}
	return t
}

// gateConn is the tabletop's side of a TCP connection: while the tabletop
// is frozen, what it reads is held back, so nothing it receives (not even
// a WebSocket ping, which the library answers by itself) gets an answer.
type gateConn struct {
	net.Conn
	t         *Tabletop
	closeOnce sync.Once
	closed    chan struct{}
}

func (c *gateConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	for {
		c.t.mu.Lock()
		frozen := c.t.frozen
		c.t.mu.Unlock()
		if frozen == nil {
			return n, err
		}
		select {
		case <-frozen:
		case <-c.closed:
			return 0, net.ErrClosed
		}
	}
}

func (c *gateConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// setBeforeReply sets what runs before each reply.
func (t *Tabletop) setBeforeReply(fn func(context.Context)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.beforeReply = fn
}

// SetCredentials sets the clientId and token, as a module that paired
// before keeps them in its settings.
func (t *Tabletop) SetCredentials(clientID, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clientID, t.token = clientID, token
}

// Credentials returns the clientId and token.
func (t *Tabletop) Credentials() (clientID, token string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.clientID, t.token
}

// httpBase is the relay's HTTP address, derived as the module does: ws →
// http, wss → https, without a trailing /relay or slash.
func (t *Tabletop) httpBase() string {
	u := strings.TrimRight(t.cfg.RelayURL, "/")
	u = strings.TrimSuffix(u, "/relay")
	switch {
	case strings.HasPrefix(u, "ws://"):
		u = "http://" + u[len("ws://"):]
	case strings.HasPrefix(u, "wss://"):
		u = "https://" + u[len("wss://"):]
	}
	return u
}

// PairResult is the relay's answer to a pairing.
type PairResult struct {
	Token    string `json:"token"`
	ClientID string `json:"clientId"`
	RelayURL string `json:"relayUrl"`
}

// HTTPError is a refusal of one of the relay's HTTP endpoints.
type HTTPError struct {
	Status int
	Msg    string
}

func (e *HTTPError) Error() string { return fmt.Sprintf("relay answered %d: %s", e.Status, e.Msg) }

// Pair posts the code to /auth/pair with the world's details and, on
// success, keeps the token and clientId it gets. Like the module, it
// presents the clientId it had, if any.
func (t *Tabletop) Pair(ctx context.Context, code string) (PairResult, error) {
	existing, _ := t.Credentials()
	body := map[string]string{
		"code": code, "worldId": t.cfg.WorldID, "worldTitle": t.cfg.WorldTitle,
		"serverFingerprint": t.cfg.ServerFingerprint, "existingClientId": existing, "serverOrigin": t.cfg.Origin,
	}
	var res PairResult
	if err := t.post(ctx, link.PathPair, body, &res); err != nil {
		return PairResult{}, err
	}
	t.SetCredentials(res.ClientID, res.Token)
	return res, nil
}

// SelfUnpair unpairs the world with its token, as the module's "unpair"
// button does, and forgets the token.
func (t *Tabletop) SelfUnpair(ctx context.Context) error {
	_, token := t.Credentials()
	if err := t.post(ctx, link.PathSelfUnpair, map[string]string{"token": token}, nil); err != nil {
		return err
	}
	t.mu.Lock()
	t.token = ""
	t.mu.Unlock()
	return nil
}

// Active asks whether the world is connected, as a module without a token
// does on start; a 404 is an *HTTPError.
func (t *Tabletop) Active(ctx context.Context) (bool, error) {
	clientID, _ := t.Credentials()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.httpBase()+"/api/clients/"+url.PathEscape(clientID)+"/active", nil)
	if err != nil {
		return false, err
	}
	var res struct {
		Active bool `json:"active"`
	}
	if err := t.do(req, &res); err != nil {
		return false, err
	}
	return res.Active, nil
}

// post sends a JSON body and decodes the answer.
func (t *Tabletop) post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.httpBase()+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Origin", t.cfg.Origin)
	return t.do(req, out)
}

// do sends a request and decodes a successful (2xx) answer into out.
func (t *Tabletop) do(req *http.Request, out any) error {
	resp, err := t.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(data, &e)
		return &HTTPError{Status: resp.StatusCode, Msg: e.Error}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// ConnectURL is the WebSocket URL with the module's query parameters, in
// the module's order; the token is never in it.
func (t *Tabletop) ConnectURL() string {
	clientID, _ := t.Credentials()
	base := t.httpBase()
	switch {
	case strings.HasPrefix(base, "http://"):
		base = "ws://" + base[len("http://"):]
	case strings.HasPrefix(base, "https://"):
		base = "wss://" + base[len("https://"):]
	}
	q := []string{"id=" + url.QueryEscape(clientID)}
	add := func(k, v string) {
		if v != "" {
			q = append(q, k+"="+url.QueryEscape(v))
		}
	}
	add("worldId", t.cfg.WorldID)
	add("worldTitle", t.cfg.WorldTitle)
	add("foundryVersion", t.cfg.FoundryVersion)
	add("systemId", t.cfg.SystemID)
	title := t.cfg.SystemTitle
	if title == "" {
		title = t.cfg.SystemID
	}
	add("systemTitle", title)
	version := t.cfg.SystemVersion
	if version == "" {
		version = "unknown"
	}
	add("systemVersion", version)
	add("customName", t.cfg.CustomName)
	return base + link.PathRelay + "?" + strings.Join(q, "&")
}

// CloseError is the end of a connection: the close code and reason the
// relay sent (-1 when the connection broke without one).
type CloseError struct {
	Code   websocket.StatusCode
	Reason string
}

func (e *CloseError) Error() string {
	return fmt.Sprintf("relay closed the connection: %d %s", int(e.Code), e.Reason)
}

// closeErrorOf describes how a connection ended.
func closeErrorOf(err error) *CloseError {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		return &CloseError{Code: ce.Code, Reason: ce.Reason}
	}
	return &CloseError{Code: -1, Reason: err.Error()}
}

// Connect opens the WebSocket, authenticates and, once the relay answered
// auth-success, serves the connection in the background (answering
// requests, pinging, recording channel changes). It returns nil once
// connected, a *CloseError when the relay refused (4002, 1008, 4004 …),
// or a handshake error (*HTTPError-like text for 400 and 429).
func (t *Tabletop) Connect(ctx context.Context) error {
	done, err := t.connect(ctx)
	if err != nil {
		return err
	}
	go func() { <-done }()
	return nil
}

// connect is Connect returning a channel closed with the connection's end.
func (t *Tabletop) connect(ctx context.Context) (<-chan *CloseError, error) {
	_, token := t.Credentials()
	dialCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(dialCtx, t.ConnectURL(), &websocket.DialOptions{
		HTTPClient: t.client,
		HTTPHeader: http.Header{"Origin": {t.cfg.Origin}},
	})
	if err != nil {
		if resp != nil {
			return nil, &HTTPError{Status: resp.StatusCode, Msg: err.Error()}
		}
		return nil, err
	}
	ws.SetReadLimit(-1)
	auth, _ := json.Marshal(map[string]string{"type": "auth", "token": token})
	if err := ws.Write(dialCtx, websocket.MessageText, auth); err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	// While authenticating, everything but auth-success is dropped, as
	// the module does.
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			ce := closeErrorOf(err)
			t.setClosed(ce.Code)
			return nil, ce
		}
		var h struct {
			Type string `json:"type"`
		}
		if json.Unmarshal(data, &h) == nil && h.Type == "auth-success" {
			t.mu.Lock()
			t.received = append(t.received, data)
			t.mu.Unlock()
			break
		}
	}
	connCtx, stop := context.WithCancel(context.Background())
	t.mu.Lock()
	t.ws, t.connCtx = ws, connCtx
	t.auths++
	t.lastClose = 0
	t.signal()
	t.mu.Unlock()
	_ = t.send(map[string]string{"type": "ping"})
	if len(t.cfg.Players) > 0 {
		_ = t.SendPlayers(t.cfg.Players)
	}
	if t.cfg.PingInterval > 0 {
		go t.pingLoop(connCtx, ws)
	}
	done := make(chan *CloseError, 1)
	go func() {
		ce := t.readLoop(connCtx, ws)
		stop()
		t.mu.Lock()
		if t.ws == ws {
			t.ws = nil
		}
		t.lastClose = ce.Code
		t.signal()
		t.mu.Unlock()
		done <- ce
	}()
	return done, nil
}

// setClosed records how the last connection attempt ended.
func (t *Tabletop) setClosed(code websocket.StatusCode) {
	t.mu.Lock()
	t.lastClose = code
	t.signal()
	t.mu.Unlock()
}

// signal wakes the waiters of a state change; t.mu must be held.
func (t *Tabletop) signal() {
	close(t.changed)
	t.changed = make(chan struct{})
}

// readLoop serves the relay's messages until the connection ends.
func (t *Tabletop) readLoop(ctx context.Context, ws *websocket.Conn) *CloseError {
	for {
		_, data, err := ws.Read(ctx)
		if err != nil {
			return closeErrorOf(err)
		}
		t.handle(ctx, data)
	}
}

// handle dispatches one message from the relay.
func (t *Tabletop) handle(ctx context.Context, data []byte) {
	var h struct {
		Type      string `json:"type"`
		RequestID string `json:"requestId"`
		Channel   any    `json:"channel"`
		Count     int    `json:"count"`
	}
	if json.Unmarshal(data, &h) != nil || h.Type == "" {
		return
	}
	t.mu.Lock()
	t.received = append(t.received, append(json.RawMessage(nil), data...))
	t.signal()
	t.mu.Unlock()
	switch h.Type {
	case "pong", "auth-success", "remote-response", "transfer-result":
		return
	case "event-subscription-update":
		ch, ok := h.Channel.(string)
		if !ok {
			return
		}
		t.mu.Lock()
		t.channels[ch] = h.Count > 0
		t.signal()
		t.mu.Unlock()
		return
	}
	if t.cfg.Handler == nil {
		return
	}
	req := Request{Type: h.Type, RequestID: h.RequestID, Message: append(json.RawMessage(nil), data...)}
	go func() {
		out, ok := t.cfg.Handler(ctx, req)
		if !ok {
			return
		}
		t.mu.Lock()
		before := t.beforeReply
		t.mu.Unlock()
		if before != nil {
			before(ctx)
		}
		msg, err := replyMessage(req, out)
		if err != nil {
			t.cfg.Log.Error("cannot encode reply", "type", req.Type, "error", err)
			return
		}
		_ = t.sendRaw(msg)
	}()
}

// RawReply is a handler's reply given as the JSON text of its fields, an
// object without `type` and `requestId`: it is sent as it is after those
// two, never decoded or encoded again (a reply prepared once, for
// benchmarks of the relay alone).
type RawReply []byte

// replyMessage adds the reply's type and requestId to the handler's
// fields, unless it set them. They come first, as in the module's
// messages. A map without them (every operation's reply) is encoded once
// and the two are written in front of it; any other value is encoded,
// looked at and encoded again.
func replyMessage(req Request, out any) ([]byte, error) {
	switch v := out.(type) {
	case RawReply:
		return withHeader(req, v), nil
	case map[string]any:
		_, hasType := v["type"]
		_, hasID := v["requestId"]
		if !hasType && !hasID {
			b, err := json.Marshal(v)
			if err != nil {
				return nil, err
			}
			return withHeader(req, b), nil
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return nil, fmt.Errorf("reply must be a JSON object: %w", err)
	}
	if fields == nil {
		fields = map[string]json.RawMessage{}
	}
	if _, ok := fields["type"]; !ok {
		fields["type"], _ = json.Marshal(req.Type + "-result")
	}
	if _, ok := fields["requestId"]; !ok {
		fields["requestId"], _ = json.Marshal(req.RequestID)
	}
	return json.Marshal(fields)
}

// withHeader writes the reply's type and requestId in front of the
// fields of obj, a JSON object that has neither.
func withHeader(req Request, obj []byte) []byte {
	typ, _ := json.Marshal(req.Type + "-result")
	id, _ := json.Marshal(req.RequestID)
	rest := bytes.TrimSpace(obj)
	if len(rest) > 0 {
		rest = bytes.TrimSpace(rest[1:]) // past the opening brace
	}
	out := make([]byte, 0, len(obj)+len(typ)+len(id)+24)
	out = append(out, `{"type":`...)
	out = append(out, typ...)
	out = append(out, `,"requestId":`...)
	out = append(out, id...)
	switch {
	case len(rest) == 0:
		return append(out, '}')
	case rest[0] != '}':
		out = append(out, ',')
	}
	return append(out, rest...)
}

// pingLoop sends the module's JSON ping every PingInterval.
func (t *Tabletop) pingLoop(ctx context.Context, ws *websocket.Conn) {
	tick := time.NewTicker(t.cfg.PingInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			_ = t.send(map[string]string{"type": "ping"})
		}
	}
}

// errNotConnected is returned by the senders without a connection.
var errNotConnected = errors.New("linktest: not connected")

// send writes one message on the live connection.
func (t *Tabletop) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return t.sendRaw(b)
}

// sendRaw writes one message as it is.
func (t *Tabletop) sendRaw(b []byte) error {
	t.mu.Lock()
	ws := t.ws
	t.mu.Unlock()
	if ws == nil {
		return errNotConnected
	}
	t.writeMu.Lock()
	defer t.writeMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, b)
}

// Send writes one message as it is, for tests of what the relay does with
// a module's odd messages.
func (t *Tabletop) Send(b []byte) error { return t.sendRaw(b) }

// SendPlayers sends a `player-list`.
func (t *Tabletop) SendPlayers(players []link.Player) error {
	return t.send(map[string]any{"type": "player-list", "users": players})
}

// Emit sends an event message of the given type (one of link.EventTypes)
// with data under `data`, as the module's event channels do.
func (t *Tabletop) Emit(eventType string, data any) error {
	return t.send(map[string]any{"type": eventType, "data": data})
}

// Channels returns which event channels the relay turned on.
func (t *Tabletop) Channels() map[string]bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]bool, len(t.channels))
	for k, v := range t.channels {
		out[k] = v
	}
	return out
}

// Received returns every message the relay sent since the tabletop was
// made, in order.
func (t *Tabletop) Received() []json.RawMessage {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]json.RawMessage(nil), t.received...)
}

// Connected reports whether the tabletop holds an authenticated
// connection; Authentications counts the connections that authenticated.
func (t *Tabletop) Connected() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ws != nil
}

// Authentications counts the connections that authenticated.
func (t *Tabletop) Authentications() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.auths
}

// LastClose returns the close code that ended the last connection or
// attempt (0 while connected or before any).
func (t *Tabletop) LastClose() websocket.StatusCode {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lastClose
}

// WaitFor waits until cond, evaluated on every change of the tabletop's
// state (connection, message, channel), holds, or ctx ends.
func (t *Tabletop) WaitFor(ctx context.Context, cond func(*Tabletop) bool) error {
	for {
		t.mu.Lock()
		ch := t.changed
		t.mu.Unlock()
		if cond(t) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Freeze holds back everything the tabletop receives until Thaw: the
// relay's pings and requests go unanswered, as with a dead network.
func (t *Tabletop) Freeze() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.frozen == nil {
		t.frozen = make(chan struct{})
	}
}

// Thaw undoes Freeze.
func (t *Tabletop) Thaw() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.frozen != nil {
		close(t.frozen)
		t.frozen = nil
	}
}

// Drop breaks the connection without a close frame, as a lost network
// does; the relay notices it when its read fails.
func (t *Tabletop) Drop() {
	t.mu.Lock()
	ws := t.ws
	t.mu.Unlock()
	if ws != nil {
		_ = ws.CloseNow()
	}
}

// Disconnect closes the connection with 1000, as the module's disconnect
// does.
func (t *Tabletop) Disconnect() {
	t.mu.Lock()
	ws := t.ws
	t.mu.Unlock()
	if ws != nil {
		_ = ws.Close(websocket.StatusNormalClosure, "Disconnecting")
	}
}

// ErrStopped is returned by Run when the relay refused the tabletop for
// good (1000, 1008, 4001, 4002) or it gave up after the maximum number of
// attempts.
var ErrStopped = errors.New("linktest: stopped")

// Run connects and stays connected as the module does until ctx ends:
// after a close it reconnects with exponential backoff (min(max, base ×
// 2^(n-1))), waits DeferredRetry after 4004, and stops for good after
// 1000, 1008, 4001 and 4002 (forgetting its token after the last three,
// as the module does) or after the maximum number of attempts.
func (t *Tabletop) Run(ctx context.Context) error {
	attempts := 0
	for {
		done, err := t.connect(ctx)
		if err == nil {
			attempts = 0
			var ce *CloseError
			select {
			case ce = <-done:
			case <-ctx.Done():
				t.Disconnect()
				<-done
				return ctx.Err()
			}
			err = ce
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		delay := time.Duration(0)
		var ce *CloseError
		switch {
		case errors.As(err, &ce) && ce.Code == websocket.StatusNormalClosure:
			return fmt.Errorf("%w: %v", ErrStopped, err)
		case errors.As(err, &ce) && (ce.Code == websocket.StatusPolicyViolation || ce.Code == 4001 || ce.Code == 4002):
			t.mu.Lock()
			t.token = ""
			t.mu.Unlock()
			return fmt.Errorf("%w: %v", ErrStopped, err)
		case errors.As(err, &ce) && ce.Code == 4004:
			delay = t.cfg.DeferredRetry
		default:
			attempts++
			if attempts > t.cfg.ReconnectMaxAttempts {
				return fmt.Errorf("%w: %d reconnection attempts failed: %v", ErrStopped, attempts-1, err)
			}
			delay = min(t.cfg.ReconnectMaxDelay, t.cfg.ReconnectBaseDelay<<(attempts-1))
		}
		t.cfg.Log.Info("reconnecting", "in", delay, "after", err)
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
