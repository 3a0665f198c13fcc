package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/netlimit"
	"github.com/tabletop-relay/relay/world"
)

// DefaultAuthTimeout is how long a module has, once its socket is open, to
// send its auth message.
const DefaultAuthTimeout = 10 * time.Second

// Limiter limits what one client address may do, by the host part of its
// address. The relay's per-address limiter of failed authentications
// implements it; a nil Limiter allows everything.
type Limiter interface {
	// Allow takes one unit of the address's allowance; when none is left
	// it returns false and how long until there is one.
	Allow(addr string) (bool, time.Duration)
	// Blocked reports, without taking anything, whether the address has
	// no allowance left, and how long until it has.
	Blocked(addr string) (bool, time.Duration)
}

// Config configures a [Service].
type Config struct {
	// Store keeps codes, worlds and tokens (required).
	Store Store
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Taken reports clientIds used by worlds that are not linked, which a
	// new linked world must not get; nil when there are none.
	Taken func(clientID string) bool
	// PublicURL is the relay's address as the module reaches it, such as
	// `https://relay.example.org`; the pairing answer tells the module
	// to connect to its `/relay` (`wss://relay.example.org/relay`). When
	// empty, the address the pairing request came to is used.
	PublicURL string
	// AuthTimeout is how long a module may take to authenticate once its
	// socket is open; DefaultAuthTimeout when 0.
	AuthTimeout time.Duration
	// AuthFailures limits, per address, the failed uses of connection
	// tokens (on /relay and /api/self-unpair) and the probes of unknown
	// worlds (/api/clients/{clientId}/active): an address past its
	// allowance gets 429 before its token is even looked at.
	AuthFailures Limiter
	// PairAttempts limits, per address, every pairing attempt, successful
	// or not: a code is short, so guessing must be slow whatever happens.
	PairAttempts Limiter
	// Refuse, when set, reports why a world whose token is valid may not
	// connect now (its account is suspended), or nil when it may. A
	// refused module is closed with 4005, after which it keeps its token
	// and tries again later.
	Refuse func(ctx context.Context, clientID string) error
	// PairFailures is the relay-wide ceiling on failed pairing attempts
	// (unknown, used or expired codes), counted under one key whatever
	// the address: guesses spread over many addresses (the visitors of a
	// web page, a botnet) stay as slow as the ceiling. Past it, every
	// pairing attempt gets 429 until the allowance comes back.
	PairFailures Limiter
	// Requests keeps the key requests and pair requests; nil turns their
	// endpoints off.
	Requests RequestStore
	// Approvals approves requests with the approver's API key; nil turns
	// the approval endpoints off.
	Approvals Approvals
	// RequestAttempts limits, per address, the requests opened (key
	// requests and pair requests together); RequestPolls the polls of
	// their status and the exchanges of the web flow.
	RequestAttempts Limiter
	RequestPolls    Limiter
	// Hub configures the connections.
	Hub HubOptions
	// Log receives pairings, connections and refusals (never a code or a
	// token); discarded when nil.
	Log *slog.Logger
}

// Service is the relay's side of linked worlds: pairing, the HTTP
// endpoints the module calls, and the live connections.
type Service struct {
	now        func() time.Time
	publicHTTP string
	requests   RequestStore
	approvals  Approvals
	// requestAttempts and requestPolls limit the requests per address.
	requestAttempts Limiter
	requestPolls    Limiter
	pairings        *Pairings
	hub             *Hub
	log             *slog.Logger
	publicURL       string
	authTimeout     time.Duration
	authFailures    Limiter
	pairAttempts    Limiter
	refuse          func(ctx context.Context, clientID string) error
	pairFailures    Limiter
}

// New returns a service over cfg.Store.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("link: a Store is required")
	}
	public, err := relayURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Hub.Log == nil {
		cfg.Hub.Log = cfg.Log
	}
	if cfg.Hub.Now == nil {
		cfg.Hub.Now = cfg.Now
	}
	if cfg.AuthTimeout <= 0 {
		cfg.AuthTimeout = DefaultAuthTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{
		now:             cfg.Now,
		publicHTTP:      httpBase(public),
		requests:        cfg.Requests,
		approvals:       cfg.Approvals,
		requestAttempts: cfg.RequestAttempts,
		requestPolls:    cfg.RequestPolls,
		pairings:        NewPairings(cfg.Store, cfg.Now, cfg.Taken),
		hub:             NewHub(cfg.Hub),
		log:             cfg.Log,
		publicURL:       public,
		authTimeout:     cfg.AuthTimeout,
		authFailures:    cfg.AuthFailures,
		pairAttempts:    cfg.PairAttempts,
		refuse:          cfg.Refuse,
		pairFailures:    cfg.PairFailures,
	}, nil
}

// relayURL turns the relay's public address into the module's WebSocket
// URL: ws or wss, the path ending in /relay. Empty stays empty.
func relayURL(public string) (string, error) {
	if public == "" {
		return "", nil
	}
	u, err := url.Parse(public)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("link: the public URL %q must be an absolute URL such as https://relay.example.org", public)
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "ws":
		u.Scheme = "ws"
	case "https", "wss":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("link: the public URL %q must start with http://, https://, ws:// or wss://", public)
	}
	u.Path = strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/relay") + "/relay"
	return u.String(), nil
}

// httpBase turns the module's WebSocket URL back into the relay's HTTP
// address (wss://host/x/relay is https://host/x). Empty stays empty.
func httpBase(relay string) string {
	if relay == "" {
		return ""
	}
	u := strings.TrimSuffix(relay, PathRelay)
	if rest, ok := strings.CutPrefix(u, "wss://"); ok {
		return "https://" + rest
	}
	return "http://" + strings.TrimPrefix(u, "ws://")
}

// Pairings returns the service's pairings.
func (s *Service) Pairings() *Pairings { return s.pairings }

// Hub returns the service's connections.
func (s *Service) Hub() *Hub { return s.hub }

// Close closes every connection (4005: the modules reconnect later) and
// waits for their close handshakes until ctx ends.
func (s *Service) Close(ctx context.Context) { s.hub.Close(ctx) }

// CreatePairingCode issues a pairing code (see Pairings.NewCode).
func (s *Service) CreatePairingCode(ctx context.Context, clientID, createdBy string) (string, Code, error) {
	return s.CreatePairingCodeIn(ctx, "", clientID, createdBy)
}

// CreatePairingCodeIn issues a pairing code of an account (see
// Pairings.NewCodeIn).
func (s *Service) CreatePairingCodeIn(ctx context.Context, account, clientID, createdBy string) (string, Code, error) {
	code, c, err := s.pairings.NewCodeIn(ctx, account, clientID, createdBy)
	if err == nil {
		s.log.Info("pairing code created", "clientId", clientID, "createdBy", createdBy, "expiresAt", c.ExpiresAt)
	}
	return code, c, err
}

// Unpair unpairs a linked world: its tokens are revoked and its connection
// closed with 1008, after which the module forgets its token. It returns
// how many tokens were revoked and whether a connection was closed.
func (s *Service) Unpair(ctx context.Context, clientID string) (int, bool, error) {
	n, err := s.pairings.Unpair(ctx, clientID)
	if err != nil {
		return 0, false, err
	}
	closed := s.hub.Disconnect(clientID, CloseAuthFailed, "Unpaired: the connection token was revoked")
	s.log.Info("linked world unpaired", "clientId", clientID, "revokedTokens", n, "disconnected", closed)
	return n, closed, nil
}

// Paths served by [Service.Handler].
const (
	PathRelay      = "/relay"
	PathPair       = "/auth/pair"
	PathSelfUnpair = "/api/self-unpair"
	clientsPrefix  = "/api/clients/"
	activeSuffix   = "/active"
)

// Owns reports whether path is one the service's handler serves, so that
// the relay can route it there before its REST API.
func Owns(path string) bool {
	switch path {
	case PathRelay, PathRelay + "/", PathPair, PathSelfUnpair:
		return true
	}
	if ownsRequestPath(path) {
		return true
	}
	_, ok := activeClientID(path)
	return ok
}

// activeClientID extracts the clientId of /api/clients/{clientId}/active.
func activeClientID(path string) (string, bool) {
	rest, ok := strings.CutPrefix(path, clientsPrefix)
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(rest, activeSuffix)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", false
	}
	return id, true
}

// Handler serves the module's endpoints: `/relay` (the WebSocket),
// `POST /auth/pair`, `POST /api/self-unpair` and
// `GET /api/clients/{clientId}/active`, and the key requests and pair
// requests under `/auth/key-request` and `/auth/pair-request`. None takes
// an API key but the approval endpoints of requests: the others
// authenticate by pairing code, connection token or request code. The module calls the
// plain HTTP ones from the game master's browser, on the tabletop's
// origin, so they allow every origin (they use no cookies).
func (s *Service) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		switch {
		case r.URL.Path == PathRelay || r.URL.Path == PathRelay+"/":
			s.serveRelay(w, r)
		case r.URL.Path == PathPair:
			if allowMethod(w, r, http.MethodPost) {
				s.audited(w, r, audit.ActionPairingPair, s.servePair)
			}
		case r.URL.Path == PathSelfUnpair:
			if allowMethod(w, r, http.MethodPost) {
				s.audited(w, r, audit.ActionPairingSelfUnpair, s.serveSelfUnpair)
			}
		case ownsRequestPath(r.URL.Path):
			s.serveRequests(w, r)
		default:
			id, ok := activeClientID(r.URL.Path)
			if !ok {
				writeError(w, http.StatusNotFound, "Not found")
				return
			}
			if allowMethod(w, r, http.MethodGet) {
				s.serveActive(w, r, id)
			}
		}
	})
}

// allowMethod answers a CORS preflight (OPTIONS) and a wrong method, and
// reports whether the request has the method that the path serves.
func allowMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	switch r.Method {
	case method:
		return true
	case http.MethodOptions:
		w.Header().Set("Access-Control-Allow-Methods", method+", OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		w.Header().Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	w.Header().Set("Allow", method+", OPTIONS")
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("Method %s is not allowed: use %s", r.Method, method))
	return false
}

// writeJSON writes a JSON answer.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// writeError writes `{"error": msg}`, the shape the module reads.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

// storeFailed answers a request whose pairing store failed: 503 with
// Retry-After when the store says it is unavailable for the moment (a
// cluster electing a leader), else 500; the cause is logged, never shown.
func (s *Service) storeFailed(w http.ResponseWriter, what, addr string, err error) {
	var werr *world.Error
	if errors.As(err, &werr) && werr.Cause != nil {
		s.log.Error(what, "addr", addr, "error", err, "cause", werr.Cause)
	} else {
		s.log.Error(what, "addr", addr, "error", err)
	}
	if errors.Is(err, world.ErrUnavailable) {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "The relay's pairing store is unavailable for the moment: try again")
		return
	}
	writeError(w, http.StatusInternalServerError, "Internal error")
}

// tooMany answers 429 with Retry-After.
func tooMany(w http.ResponseWriter, wait time.Duration, what string) {
	seconds := max(int(math.Ceil(wait.Seconds())), 1)
	w.Header().Set("Retry-After", strconv.Itoa(seconds))
	writeError(w, http.StatusTooManyRequests, fmt.Sprintf("Too many %s from this address; retry in %d s", what, seconds))
}

// addressOf is the host part of a remote address.
func addressOf(remoteAddr string) string {
	if host, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return host
	}
	return remoteAddr
}

// blocked answers 429 when the address has no allowance of failed
// authentications left.
func (s *Service) blocked(w http.ResponseWriter, addr string) bool {
	if s.authFailures == nil {
		return false
	}
	if b, wait := s.authFailures.Blocked(netlimit.AddressKey(addr)); b {
		tooMany(w, wait, "failed authentications")
		return true
	}
	return false
}

// failed counts a failed authentication against the address.
func (s *Service) failed(addr string) {
	if s.authFailures != nil {
		s.authFailures.Allow(netlimit.AddressKey(addr))
	}
}

// maxPairBody bounds the bodies of the pairing endpoints.
const maxPairBody = 16 << 10

// readBody decodes a small JSON object body into v, naming a field of the
// wrong type.
func readBody(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPairBody))
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &typeErr) && typeErr.Field != "":
			want := "a string"
			if typeErr.Type != nil && typeErr.Type.Kind() == reflect.Slice {
				want = "an array of strings"
			}
			return invalid("'%s' must be %s", typeErr.Field, want)
		case errors.As(err, &tooBig):
			return invalid("The request body is larger than %d bytes", maxPairBody)
		}
		return invalid("The request body must be a JSON object")
	}
	return nil
}

// pairAnswer is the answer of `POST /auth/pair`.
type pairAnswer struct {
	Token    string `json:"token"`
	ClientID string `json:"clientId"`
	RelayURL string `json:"relayUrl"`
}

// servePair trades a pairing code for a connection token.
func (s *Service) servePair(w http.ResponseWriter, r *http.Request) {
	addr := addressOf(r.RemoteAddr)
	if s.pairFailures != nil {
		if b, wait := s.pairFailures.Blocked(relayWide); b {
			seconds := max(int(math.Ceil(wait.Seconds())), 1)
			w.Header().Set("Retry-After", strconv.Itoa(seconds))
			writeError(w, http.StatusTooManyRequests, fmt.Sprintf("Too many failed pairing attempts on this relay; retry in %d s", seconds))
			return
		}
	}
	if s.pairAttempts != nil {
		if ok, wait := s.pairAttempts.Allow(netlimit.AddressKey(addr)); !ok {
			tooMany(w, wait, "pairing attempts")
			return
		}
	}
	var req PairRequest
	if err := readBody(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !fromTabletopPage(r.Header.Get("Origin"), req.ServerOrigin) {
		s.log.Info("pairing refused", "addr", addr, "reason", "browser origin other than the tabletop's", "origin", clip(r.Header.Get("Origin")))
		writeError(w, http.StatusForbidden, "Pairing from a web page is allowed only from the tabletop's own page: the request's Origin must be its 'serverOrigin'")
		return
	}
	p, err := s.pairings.Pair(r.Context(), req)
	if errors.Is(err, ErrCodeRejected) && s.pairFailures != nil {
		s.pairFailures.Allow(relayWide)
	}
	switch {
	case errors.Is(err, world.ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case errors.Is(err, ErrCodeForNewWorld):
		s.log.Info("pairing refused", "addr", addr, "reason", "code for a new world presented for a known one", "clientId", req.ExistingClientID)
		writeError(w, http.StatusForbidden, err.Error())
		return
	case errors.Is(err, ErrCodeRejected):
		s.log.Info("pairing refused", "addr", addr, "reason", err.Error())
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	case err != nil:
		s.storeFailed(w, "pairing failed", addr, err)
		return
	}
	if p.Again {
		// The world's earlier token no longer works: a connection made
		// with it must come back with the new one.
		s.hub.Disconnect(p.World.ClientID, CloseShutdown, "Paired again: reconnect with the new token")
	}
	s.log.Info("world paired", "clientId", p.World.ClientID, "again", p.Again, "worldTitle", p.World.WorldTitle, "addr", addr)
	n := noteOf(r.Context())
	n.account, n.target = accountOrOperator(p.World.Account), p.World.ClientID
	n.detail = fmt.Sprintf("world %q (%s)", p.World.WorldTitle, p.World.WorldID)
	if p.Again {
		n.detail += ", paired again"
	}
	u := s.publicURL
	if u == "" {
		scheme := "ws"
		if r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
			scheme = "wss"
		}
		u = scheme + "://" + r.Host + PathRelay
	}
	writeJSON(w, http.StatusOK, pairAnswer{Token: p.Token, ClientID: p.World.ClientID, RelayURL: u})
}

// relayWide is the one key of the relay-wide ceiling on failed pairings.
const relayWide = "relay"

// fromTabletopPage reports whether a pairing request may come from where
// it does. The module pairs from the game master's browser, on the
// tabletop's own page, and tells the relay that page's address as
// serverOrigin: a request from a browser (one with an Origin header) must
// come from the origin it claims, so that any other web page cannot make
// its visitors' browsers pair, or guess codes, for a tabletop it is not.
// A request without an Origin (not from a web page) is not judged here.
func fromTabletopPage(origin, serverOrigin string) bool {
	if origin == "" {
		return true
	}
	o, ok := originOf(origin)
	if !ok {
		return false
	}
	so, ok := originOf(serverOrigin)
	return ok && o == so
}

// originOf reduces a URL to its origin (scheme://host[:port], lower case,
// default ports left out); "null" and anything not http or https is no
// origin.
func originOf(raw string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return "", false
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	switch {
	case scheme == "http":
		host = strings.TrimSuffix(host, ":80")
	case scheme == "https":
		host = strings.TrimSuffix(host, ":443")
	default:
		return "", false
	}
	return scheme + "://" + host, true
}

// serveSelfUnpair lets the module unpair its own world with its token.
func (s *Service) serveSelfUnpair(w http.ResponseWriter, r *http.Request) {
	addr := addressOf(r.RemoteAddr)
	if s.blocked(w, addr) {
		return
	}
	var req struct {
		Token string `json:"token"`
	}
	if err := readBody(w, r, &req); err != nil {
		s.failed(addr)
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Token == "" {
		s.failed(addr)
		writeError(w, http.StatusBadRequest, "'token' is required")
		return
	}
	clientID, _, err := s.pairings.Authenticate(r.Context(), req.Token)
	if errors.Is(err, ErrTokenRejected) {
		s.failed(addr)
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	if err == nil {
		n := noteOf(r.Context())
		n.target = clientID
		if rec, werr := s.pairings.World(r.Context(), clientID); werr == nil {
			n.account = accountOrOperator(rec.Account)
		}
		_, err = s.pairings.Unpair(r.Context(), clientID)
	}
	if err != nil {
		s.storeFailed(w, "self-unpair failed", addr, err)
		return
	}
	// The module forgets its token itself; 1000 keeps it from coming back.
	s.hub.Disconnect(clientID, CloseNormal, "Unpaired")
	s.log.Info("linked world unpaired itself", "clientId", clientID, "addr", addr)
	writeJSON(w, http.StatusOK, map[string]any{"success": true, "clientId": clientID})
}

// serveActive tells a module whether its world is connected (through
// another browser, typically). A world that was unpaired is still known:
// it answers `active: false`, so the module keeps its clientId and a new
// pairing restores it. Only an unknown clientId is a 404.
func (s *Service) serveActive(w http.ResponseWriter, r *http.Request, clientID string) {
	addr := addressOf(r.RemoteAddr)
	if s.blocked(w, addr) {
		return
	}
	_, err := s.pairings.World(r.Context(), clientID)
	switch {
	case errors.Is(err, ErrUnknownWorld):
		s.failed(addr)
		writeError(w, http.StatusNotFound, "Unknown client: "+displayID(clientID))
		return
	case err != nil:
		s.storeFailed(w, "active probe failed", addr, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"active": s.hub.Online(clientID)})
}

// authMessageLimit bounds the first message, read before the module is
// known: an auth message is a few dozen bytes.
const authMessageLimit = 4 << 10

// maxInfoBytes bounds each connection query parameter kept.
const maxInfoBytes = 256

// serveRelay is the module's WebSocket: it checks the request, upgrades,
// waits for the auth message, and serves the connection until it closes.
func (s *Service) serveRelay(w http.ResponseWriter, r *http.Request) {
	addr := addressOf(r.RemoteAddr)
	if s.blocked(w, addr) {
		return
	}
	query := r.URL.Query()
	if query.Has("token") {
		s.failed(addr)
		s.log.Info("linked world refused", "addr", addr, "reason", "token in the URL")
		writeError(w, http.StatusBadRequest, "A token in the URL is not accepted: send it in the first message, {\"type\":\"auth\",\"token\":...}")
		return
	}
	id := query.Get("id")
	if id == "" {
		writeError(w, http.StatusBadRequest, "Missing client ID: the 'id' query parameter is required")
		return
	}
	// The module runs in the game master's browser on the tabletop's
	// origin, never the relay's: every origin is accepted. Nothing rides
	// on the browser's cookies; the token in the first message is the
	// only credential.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return // Accept answered the request
	}
	ws.SetReadLimit(authMessageLimit)
	clientID, token, ok := s.authenticate(ws, addr, id)
	if !ok {
		return
	}
	info := ConnInfo{
		ClientID:       clientID,
		WorldID:        clip(query.Get("worldId")),
		WorldTitle:     clip(query.Get("worldTitle")),
		FoundryVersion: clip(query.Get("foundryVersion")),
		SystemID:       clip(query.Get("systemId")),
		SystemTitle:    clip(query.Get("systemTitle")),
		SystemVersion:  clip(query.Get("systemVersion")),
		CustomName:     clip(query.Get("customName")),
		PublicURL:      clip(r.Header.Get("Origin")),
		RemoteAddr:     r.RemoteAddr,
		ConnectedAt:    s.hub.opts.Now(),
	}
	c := newConn(s.hub, ws, clientID, token, addr, info)
	c.enqueue([]byte(`{"type":"` + typeAuthSuccess + `"}`))
	if err := s.hub.attach(c); err != nil {
		code := CloseDuplicate
		if errors.Is(err, errClosed) {
			code = CloseShutdown
		}
		s.log.Info("linked world refused", "clientId", clientID, "addr", addr, "reason", err.Error())
		_ = ws.Close(code, err.Error())
		return
	}
	s.log.Info("linked world connected", "clientId", clientID, "addr", addr, "worldTitle", info.WorldTitle,
		"systemId", info.SystemID, "foundryVersion", info.FoundryVersion)
	// The writer runs before OnConnect, so that the callback may already
	// call the world.
	c.start()
	if fn := s.hub.opts.OnConnect; fn != nil {
		fn(c.Info())
	}
	c.read()
}

// authenticate reads the auth message within the auth time-out and checks
// its token, which must belong to the world the URL names. On failure it
// closes the socket with the code the module expects: 4002 for a missing,
// slow or malformed auth message, 1008 for a bad token (and the library's
// 1009 for one over the size limit of an auth message).
func (s *Service) authenticate(ws *websocket.Conn, addr, id string) (string, Hash, bool) {
	refuse := func(code StatusCode, reason, why string) (string, Hash, bool) {
		s.failed(addr)
		s.log.Info("linked world refused", "addr", addr, "code", int(code), "reason", why)
		_ = ws.Close(code, reason)
		return "", Hash{}, false
	}
	var timedOut atomic.Bool
	timer := time.AfterFunc(s.authTimeout, func() {
		timedOut.Store(true)
		_ = ws.Close(CloseNoAuth, "Authentication timeout")
	})
	typ, data, err := ws.Read(context.Background())
	timer.Stop()
	if timedOut.Load() {
		s.failed(addr)
		s.log.Info("linked world refused", "addr", addr, "code", int(CloseNoAuth), "reason", "no auth message in time")
		return "", Hash{}, false
	}
	if err != nil {
		if websocket.CloseStatus(err) == CloseTooBig {
			// The library closed the socket with 1009 itself.
			s.failed(addr)
			s.log.Info("linked world refused", "addr", addr, "code", int(CloseTooBig), "reason", "auth message too big")
			return "", Hash{}, false
		}
		s.log.Info("linked world left before authenticating", "addr", addr)
		_ = ws.CloseNow()
		return "", Hash{}, false
	}
	var msg struct {
		Type  string `json:"type"`
		Token string `json:"token"`
	}
	if typ != websocket.MessageText || json.Unmarshal(data, &msg) != nil || msg.Type != typeAuth || msg.Token == "" {
		return refuse(CloseNoAuth, "Invalid auth message", "invalid auth message")
	}
	clientID, token, err := s.pairings.Authenticate(context.Background(), msg.Token)
	switch {
	case errors.Is(err, ErrTokenRejected):
		return refuse(CloseAuthFailed, "Authentication failed", "unknown or revoked token")
	case err != nil:
		s.log.Error("token check failed", "addr", addr, "error", err)
		_ = ws.Close(websocket.StatusInternalError, "Internal error")
		return "", Hash{}, false
	case clientID != id:
		return refuse(CloseAuthFailed, "Authentication failed", "token of another world")
	}
	if s.refuse != nil {
		if err := s.refuse(context.Background(), clientID); err != nil {
			// Not a failed authentication: the token is good, and the
			// module keeps it for when the refusal ends.
			s.log.Info("linked world refused", "addr", addr, "clientId", clientID, "code", int(CloseShutdown), "reason", err.Error())
			_ = ws.Close(CloseShutdown, "Account suspended")
			return "", Hash{}, false
		}
	}
	return clientID, token, true
}

// clip bounds a value the module reports about itself.
func clip(s string) string {
	if len(s) > maxInfoBytes {
		return s[:maxInfoBytes]
	}
	return s
}
