package link_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
)

// clock is a settable clock for expiry tests.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a link service on a test HTTP server, over a SQLite store.
type env struct {
	t      *testing.T
	svc    *link.Service
	srv    *httptest.Server
	dbPath string
	clock  *clock
	events chan link.Event
}

// newEnv starts a service; mutate adjusts its configuration.
func newEnv(t *testing.T, mutate ...func(*link.Config)) *env {
	t.Helper()
	dbPath := filepath.Join(t.TempDir(), "relay.db")
	store, err := link.OpenSQLite(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	e := &env{t: t, dbPath: dbPath, clock: &clock{t: time.Now()}, events: make(chan link.Event, 100)}
	cfg := link.Config{Store: store, Now: e.clock.now, AuthTimeout: 2 * time.Second,
		Hub: link.HubOptions{ReplyTimeout: 5 * time.Second, PingInterval: 5 * time.Second, DuplicateProbe: time.Second,
			OnEvent: func(_ string, ev link.Event) { e.events <- ev }}}
	for _, m := range mutate {
		m(&cfg)
	}
	if e.svc, err = link.New(cfg); err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.svc.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e.svc.Close(ctx)
		e.srv.Close()
	})
	return e
}

// code issues a pairing code for a new world, or for clientID.
func (e *env) code(clientID string) string {
	e.t.Helper()
	code, _, err := e.svc.CreatePairingCode(context.Background(), clientID, "test")
	if err != nil {
		e.t.Fatal(err)
	}
	return code
}

// tabletop returns an unpaired tabletop for the server.
func (e *env) tabletop(mutate ...func(*linktest.Config)) *linktest.Tabletop {
	cfg := linktest.Config{RelayURL: e.srv.URL, WorldID: "tavern-tales", WorldTitle: "Tavern Tales",
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemTitle: "Dungeons & Dragons Fifth Edition", SystemVersion: "5.0.4",
		CustomName: "Thursday game", ServerFingerprint: "fp-0123456789abcdef0123456789abcd",
		Players: []link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true},
			{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer}},
		ReconnectBaseDelay: 20 * time.Millisecond, ReconnectMaxDelay: 100 * time.Millisecond}
	for _, m := range mutate {
		m(&cfg)
	}
	return linktest.New(cfg)
}

// connected pairs a new tabletop and connects it.
func (e *env) connected(mutate ...func(*linktest.Config)) *linktest.Tabletop {
	e.t.Helper()
	tt := e.tabletop(mutate...)
	if _, err := tt.Pair(context.Background(), e.code("")); err != nil {
		e.t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(tt.Drop)
	return tt
}

// wait waits for cond, failing the test after 10 s.
func (e *env) wait(what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeCode returns the close code of a connection attempt's error.
func closeCode(t *testing.T, err error) websocket.StatusCode {
	t.Helper()
	var ce *linktest.CloseError
	if !errors.As(err, &ce) {
		t.Fatalf("want a close error, got %v", err)
	}
	return ce.Code
}

func TestPairingCodeWorksOnceAndNormalised(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	code := e.code("")
	if len(code) != link.CodeLength || strings.Trim(code, link.CodeAlphabet) != "" {
		t.Fatalf("code %q is not %d characters of the alphabet", code, link.CodeLength)
	}
	tt := e.tabletop()
	// Typed in lower case with a dash, as people do.
	typed := strings.ToLower(code[:3]) + "-" + strings.ToLower(code[3:])
	res, err := tt.Pair(context.Background(), typed)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(res.ClientID, "fvtt_") || !strings.HasPrefix(res.Token, "rlt_") {
		t.Fatalf("pairing answer %+v", res)
	}
	if want := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/relay"; res.RelayURL != want {
		t.Fatalf("relayUrl %q, want %q", res.RelayURL, want)
	}
	// A code works once.
	_, err = e.tabletop().Pair(context.Background(), code)
	var he *linktest.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusUnauthorized || he.Msg != link.ErrCodeRejected.Error() {
		t.Fatalf("second use of a code: %v", err)
	}
}

func TestPairingCodeExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	code := e.code("")
	e.clock.advance(link.CodeTTL)
	_, err := e.tabletop().Pair(context.Background(), code)
	var he *linktest.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("expired code: %v", err)
	}
	// A minute short of the limit it works.
	code = e.code("")
	e.clock.advance(link.CodeTTL - time.Minute)
	if _, err := e.tabletop().Pair(context.Background(), code); err != nil {
		t.Fatalf("live code: %v", err)
	}
}

func TestPairingRefusesBadParameters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		name, body, want string
	}{
		{"no body", ``, "The request body must be a JSON object"},
		{"not an object", `[1]`, "The request body must be a JSON object"},
		{"no code", `{"worldId":"w","serverFingerprint":"f"}`, "'code' is required"},
		{"short code", `{"code":"ABC","worldId":"w","serverFingerprint":"f"}`, "'code' must be the 6-character pairing code"},
		{"look-alike", `{"code":"ABCDE0","worldId":"w","serverFingerprint":"f"}`, "'code' must be the 6-character pairing code"},
		{"code of the wrong type", `{"code":123456,"worldId":"w","serverFingerprint":"f"}`, "'code' must be a string"},
		{"no world id", `{"code":"ABCDEF","serverFingerprint":"f"}`, "'worldId' is required"},
		{"no fingerprint", `{"code":"ABCDEF","worldId":"w"}`, "'serverFingerprint' is required"},
		{"control characters", `{"code":"ABCDEF","worldId":"w\u0000","serverFingerprint":"f"}`, "'worldId' must be text without control characters"},
		{"long title", `{"code":"ABCDEF","worldId":"w","serverFingerprint":"f","worldTitle":"` + strings.Repeat("x", 600) + `"}`, "'worldTitle' is longer than 512 bytes"},
	} {
		resp, err := http.Post(e.srv.URL+link.PathPair, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		var body struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || body.Error != c.want {
			t.Errorf("%s: %d %q, want 400 %q", c.name, resp.StatusCode, body.Error, c.want)
		}
	}
	// Wrong method, and the browser's preflight.
	resp, err := http.Get(e.srv.URL + link.PathPair)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /auth/pair: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodOptions, e.srv.URL+link.PathPair, nil)
	req.Header.Set("Origin", "http://localhost:30000")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent || resp.Header.Get("Access-Control-Allow-Origin") != "*" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "POST") {
		t.Errorf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestRepairKeepsClientIDAndRevokesTheOldToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tt := e.connected()
	clientID, oldToken := tt.Credentials()

	// Paired again with a code made for it: the same world, a new token,
	// and the connection made with the old token is told to come back
	// with the new one.
	again := e.tabletop()
	again.SetCredentials(clientID, "")
	res, err := again.Pair(ctx, e.code(clientID))
	if err != nil {
		t.Fatal(err)
	}
	if res.ClientID != clientID || res.Token == oldToken {
		t.Fatalf("re-pair gave %+v, want clientId %s and a new token", res, clientID)
	}
	e.wait("the old connection to close", func() bool { return !tt.Connected() })
	if got := tt.LastClose(); got != link.CloseShutdown {
		t.Fatalf("old connection closed with %d, want 4005", got)
	}
	// The old token no longer works; the new one does.
	if err := tt.Connect(ctx); closeCode(t, err) != link.CloseAuthFailed {
		t.Fatalf("old token: %v", err)
	}
	if err := again.Connect(ctx); err != nil {
		t.Fatalf("new token: %v", err)
	}
	again.Drop()

	// Another fingerprint with the same clientId is another world.
	other := e.tabletop(func(c *linktest.Config) { c.ServerFingerprint = "another-server" })
	other.SetCredentials(clientID, "")
	res, err = other.Pair(ctx, e.code(""))
	if err != nil {
		t.Fatal(err)
	}
	if res.ClientID == clientID {
		t.Fatal("a different fingerprint kept the clientId")
	}

	// A code for one world pairs that world whatever the module presents.
	third := e.tabletop(func(c *linktest.Config) { c.ServerFingerprint = "moved-server" })
	res, err = third.Pair(ctx, e.code(clientID))
	if err != nil || res.ClientID != clientID {
		t.Fatalf("code for %s paired %+v, %v", clientID, res, err)
	}
	// A code for a world that is not linked cannot be made.
	if _, _, err := e.svc.CreatePairingCode(ctx, "demo", "test"); !errors.Is(err, link.ErrUnknownWorld) || !errors.Is(err, world.ErrNotFound) {
		t.Fatalf("code for an unknown world: %v", err)
	}
}

// TestCodeForNewWorldCannotTakeOverAWorld presents a code made for a new
// world with a linked world's clientId and fingerprint (neither is a
// secret): the pairing is refused with 403 naming the field, the world
// keeps its connection and token, and a code made for the world still
// pairs it again.
func TestCodeForNewWorldCannotTakeOverAWorld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tt := e.connected()
	clientID, token := tt.Credentials()

	intruder := e.tabletop()
	intruder.SetCredentials(clientID, "")
	_, err := intruder.Pair(ctx, e.code(""))
	var he *linktest.HTTPError
	if !errors.As(err, &he) || he.Status != http.StatusForbidden ||
		!strings.Contains(he.Msg, "'existingClientId'") || !strings.Contains(he.Msg, clientID) {
		t.Fatalf("a new world's code presented for %s: %v, want 403 naming existingClientId", clientID, err)
	}
	if got, _ := intruder.Credentials(); got != clientID {
		t.Fatalf("the refused pairing changed the intruder's credentials to %q", got)
	}
	// Nothing changed: the world's socket stays and its token still works.
	time.Sleep(50 * time.Millisecond)
	if !tt.Connected() {
		t.Fatal("the refused pairing closed the world's connection")
	}
	if _, _, err := e.svc.Pairings().Authenticate(ctx, token); err != nil {
		t.Fatalf("the world's token after a refused pairing: %v", err)
	}
	// Without the fingerprint the same code's kind pairs a new world.
	stranger := e.tabletop(func(c *linktest.Config) { c.ServerFingerprint = "stranger" })
	stranger.SetCredentials(clientID, "")
	res, err := stranger.Pair(ctx, e.code(""))
	if err != nil || res.ClientID == clientID || res.ClientID == "" {
		t.Fatalf("another fingerprint with a new world's code: %+v, %v; want a new world", res, err)
	}
	if !tt.Connected() {
		t.Fatal("a new world's pairing closed another world's connection")
	}
	// The honest module with a code made for its world pairs again.
	honest := e.tabletop()
	honest.SetCredentials(clientID, "")
	if res, err := honest.Pair(ctx, e.code(clientID)); err != nil || res.ClientID != clientID {
		t.Fatalf("a code made for %s: %+v, %v", clientID, res, err)
	}
}

func TestTokensAndCodesAreStoredOnlyAsHashes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	code := e.code("")
	unused := e.code("")
	tt := e.tabletop()
	res, err := tt.Pair(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	var all []byte
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(e.dbPath + suffix)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if len(all) == 0 {
		t.Fatal("nothing written")
	}
	for _, secret := range []string{res.Token, res.Token[len("rlt_"):], unused} {
		if bytes.Contains(all, []byte(secret)) {
			t.Fatalf("the database holds a secret in the clear: %q", secret)
		}
	}
	if !bytes.Contains(all, []byte(res.ClientID)) {
		t.Fatal("the database does not hold the world (is this the right file?)")
	}
}

func TestUnpairRevokesAndDisconnects(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tt := e.connected()
	clientID, _ := tt.Credentials()
	if active, err := tt.Active(ctx); err != nil || !active {
		t.Fatalf("active: %v %v", active, err)
	}
	n, closed, err := e.svc.Unpair(ctx, clientID)
	if err != nil || n != 1 || !closed {
		t.Fatalf("unpair: %d %v %v", n, closed, err)
	}
	e.wait("the connection to close", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseAuthFailed {
		t.Fatalf("closed with %d, want 1008", tt.LastClose())
	}
	if err := tt.Connect(ctx); closeCode(t, err) != link.CloseAuthFailed {
		t.Fatalf("revoked token: %v", err)
	}
	// The world is still known (a new code restores it), not active.
	if active, err := tt.Active(ctx); err != nil || active {
		t.Fatalf("active after unpair: %v %v", active, err)
	}
	if _, _, err := e.svc.Unpair(ctx, "fvtt_0000000000000000"); !errors.Is(err, link.ErrUnknownWorld) {
		t.Fatalf("unpair unknown: %v", err)
	}
	// A new pairing with a code made for the world restores it.
	res, err := tt.Pair(ctx, e.code(clientID))
	if err != nil || res.ClientID != clientID {
		t.Fatalf("re-pair after unpair: %+v %v", res, err)
	}
}

func TestSelfUnpairAndActive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	tt := e.connected()
	if err := tt.SelfUnpair(ctx); err != nil {
		t.Fatal(err)
	}
	e.wait("the connection to close", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseNormal {
		t.Fatalf("closed with %d, want 1000", tt.LastClose())
	}
	// The token is gone: unpairing again is refused.
	clientID, _ := tt.Credentials()
	stale := e.tabletop()
	stale.SetCredentials(clientID, "rlt_"+strings.Repeat("A", 43))
	var he *linktest.HTTPError
	if err := stale.SelfUnpair(ctx); !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("self-unpair with a bad token: %v", err)
	}
	unknown := e.tabletop()
	unknown.SetCredentials("fvtt_ffffffffffffffff", "")
	if _, err := unknown.Active(ctx); !errors.As(err, &he) || he.Status != http.StatusNotFound {
		t.Fatalf("active for an unknown world: %v", err)
	}
}

func TestRelayRefusesBadAuthentication(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.AuthTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	tt := e.connected()
	clientID, token := tt.Credentials()
	tt.Drop()
	wsURL := "ws" + strings.TrimPrefix(e.srv.URL, "http") + link.PathRelay

	// A token in the URL is refused before the upgrade.
	_, resp, err := websocket.Dial(ctx, wsURL+"?id="+clientID+"&token="+token, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("token in URL: %v %v", resp, err)
	}
	// So is a connection without the world's id.
	_, resp, err = websocket.Dial(ctx, wsURL, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no id: %v %v", resp, err)
	}

	// Each case dials, sends what it sends and reads the close.
	for _, c := range []struct {
		name   string
		id     string
		send   string // "" sends nothing
		code   websocket.StatusCode
		reason string
	}{
		{"no auth message", clientID, "", link.CloseNoAuth, "Authentication timeout"},
		{"not JSON", clientID, "hello", link.CloseNoAuth, "Invalid auth message"},
		{"not an auth message", clientID, `{"type":"ping"}`, link.CloseNoAuth, "Invalid auth message"},
		{"empty token", clientID, `{"type":"auth","token":""}`, link.CloseNoAuth, "Invalid auth message"},
		{"unknown token", clientID, `{"type":"auth","token":"rlt_` + strings.Repeat("B", 43) + `"}`, link.CloseAuthFailed, "Authentication failed"},
		{"garbage token", clientID, `{"type":"auth","token":"hunter2"}`, link.CloseAuthFailed, "Authentication failed"},
		{"token of another world", "fvtt_0123456789abcdef", `{"type":"auth","token":"` + token + `"}`, link.CloseAuthFailed, "Authentication failed"},
		// The WebSocket library answers a message over the limit itself.
		{"oversized auth message", clientID, `{"type":"auth","token":"` + strings.Repeat("x", 8000) + `"}`, link.CloseTooBig, ""},
	} {
		ws, _, err := websocket.Dial(ctx, wsURL+"?id="+c.id, nil)
		if err != nil {
			t.Fatalf("%s: dial: %v", c.name, err)
		}
		if c.send != "" {
			if err := ws.Write(ctx, websocket.MessageText, []byte(c.send)); err != nil {
				t.Fatalf("%s: write: %v", c.name, err)
			}
		}
		readCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _, err = ws.Read(readCtx)
		cancel()
		var ce websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != c.code || (c.reason != "" && ce.Reason != c.reason) {
			t.Errorf("%s: %v, want close %d %q", c.name, err, c.code, c.reason)
		}
		ws.CloseNow()
	}
	if e.svc.Hub().Online(clientID) {
		t.Fatal("a refused connection went online")
	}
}

func TestDuplicateConnections(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.DuplicateProbe = 300 * time.Millisecond })
	ctx := context.Background()
	first := e.connected()
	clientID, token := first.Credentials()

	// While the first answers pings, a newcomer is refused with 4004, from
	// the same address (a second tab of the game master's browser) as
	// from another.
	same := e.tabletop()
	same.SetCredentials(clientID, token)
	if err := same.Connect(ctx); closeCode(t, err) != link.CloseDuplicate {
		t.Fatalf("duplicate from the same address: %v", err)
	}
	elsewhere := e.tabletop(func(c *linktest.Config) { c.LocalAddr = "127.0.0.2" })
	elsewhere.SetCredentials(clientID, token)
	if err := elsewhere.Connect(ctx); closeCode(t, err) != link.CloseDuplicate {
		t.Fatalf("duplicate from another address: %v", err)
	}
	if !first.Connected() || !e.svc.Hub().Online(clientID) {
		t.Fatal("the live connection was dropped")
	}
	// Once the first stops answering (the module reconnecting before the
	// relay noticed its socket die), a newcomer from the same address
	// takes over, and the old connection is closed with a code after which
	// the module reconnects.
	first.Freeze()
	defer first.Thaw()
	if err := same.Connect(ctx); err != nil {
		t.Fatalf("takeover from a dead connection: %v", err)
	}
	first.Thaw()
	e.wait("the old connection to close", func() bool { return !first.Connected() })
	if code := first.LastClose(); code == link.CloseNormal || code == link.CloseAuthFailed || code == link.CloseNoAuth {
		t.Fatalf("replaced connection closed with %d, after which the module would not come back", code)
	}
	// Once the first stops answering, the newcomer takes over.
	same.Freeze()
	defer same.Thaw()
	if err := elsewhere.Connect(ctx); err != nil {
		t.Fatalf("takeover from a dead connection: %v", err)
	}
	info, _ := e.svc.Hub().Info(clientID)
	if !strings.HasPrefix(info.RemoteAddr, "127.0.0.2:") {
		t.Fatalf("the world's connection is from %s", info.RemoteAddr)
	}
}

func TestPingsAndConnectionInfo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tt := e.connected()
	clientID, _ := tt.Credentials()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The tabletop sends a JSON ping right after auth-success.
	if err := tt.WaitFor(ctx, func(tt *linktest.Tabletop) bool {
		for _, m := range tt.Received() {
			if string(m) == `{"type":"pong"}` {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no pong to the JSON ping")
	}
	if first := tt.Received()[0]; string(first) != `{"type":"auth-success"}` {
		t.Fatalf("first message %s", first)
	}
	e.wait("the player list", func() bool { info, _ := e.svc.Hub().Info(clientID); return len(info.Players) == 2 })
	info, _ := e.svc.Hub().Info(clientID)
	want := link.ConnInfo{ClientID: clientID, WorldID: "tavern-tales", WorldTitle: "Tavern Tales", FoundryVersion: "13.345",
		SystemID: "dnd5e", SystemTitle: "Dungeons & Dragons Fifth Edition", SystemVersion: "5.0.4", CustomName: "Thursday game",
		PublicURL: "http://localhost:30000"}
	got := info
	got.RemoteAddr, got.ConnectedAt, got.LastSeen, got.Players = "", time.Time{}, time.Time{}, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("connection info\n got %+v\nwant %+v", got, want)
	}
	if p := info.Players[1]; p.Name != "Alice" || p.Role != world.RolePlayer || p.User().Role != world.RolePlayer {
		t.Fatalf("players %+v", info.Players)
	}
	// A new list replaces the old one.
	if err := tt.SendPlayers([]link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster}}); err != nil {
		t.Fatal(err)
	}
	e.wait("the new player list", func() bool { info, _ := e.svc.Hub().Info(clientID); return len(info.Players) == 1 })
	// Events reach the callback as sent.
	if err := tt.Emit("actor-event", map[string]any{"actorUuid": "Actor.x", "eventType": "update"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-e.events:
		if ev.Type != "actor-event" || !strings.Contains(string(ev.Message), `"actorUuid":"Actor.x"`) {
			t.Fatalf("event %s %s", ev.Type, ev.Message)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event")
	}
	// The module's cross-world requests are refused at once.
	if err := tt.Send([]byte(`{"type":"remote-request","requestId":"rr1","targetClientId":"x","action":"entity"}`)); err != nil {
		t.Fatal(err)
	}
	if err := tt.WaitFor(ctx, func(tt *linktest.Tabletop) bool {
		for _, m := range tt.Received() {
			if strings.Contains(string(m), `"type":"remote-response"`) && strings.Contains(string(m), `"success":false`) {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatal("no refusal of the remote request")
	}
}

func TestDeadPeerIsDetectedByPing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.PingInterval = 100 * time.Millisecond })
	block := make(chan struct{})
	defer close(block)
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = func(ctx context.Context, _ linktest.Request) (any, bool) {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return nil, false
		}
	})
	clientID, _ := tt.Credentials()
	tt.Freeze()
	defer tt.Thaw()
	start := time.Now()
	_, err := e.svc.Hub().Call(context.Background(), clientID, "entity", map[string]any{"uuid": "Actor.x"})
	if !errors.Is(err, link.ErrDisconnected) {
		t.Fatalf("call to a dead world: %v", err)
	}
	if time.Since(start) > 4*time.Second {
		t.Fatalf("the dead world was noticed after %v (reply time-out 5 s)", time.Since(start))
	}
	if e.svc.Hub().Online(clientID) {
		t.Fatal("dead world still online")
	}
}

// TestHeldReaderIsNotTakenForADeadPeer: while the world's events are
// held back (the receiver of events takes longer than several ping
// intervals, as back-pressure does when the relay processes a flood
// slowly), the socket's reader cannot read pongs; the connection must stay
// open, and the world online, once the events go through.
func TestHeldReaderIsNotTakenForADeadPeer(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	e := newEnv(t, func(c *link.Config) {
		c.Hub.PingInterval = 100 * time.Millisecond
		c.Hub.OnEvent = func(_ string, ev link.Event) {
			select {
			case held <- struct{}{}:
				<-release
			default:
			}
		}
	})
	tt := e.connected()
	clientID, _ := tt.Credentials()
	if err := tt.Emit("hook-event", map[string]any{"hook": "updateActor", "args": []any{}}); err != nil {
		t.Fatal(err)
	}
	<-held
	time.Sleep(time.Second) // ten ping intervals with the reader held
	if !e.svc.Hub().Online(clientID) {
		t.Fatal("the world went offline while its reader was held by back-pressure")
	}
	close(release)
	if err := tt.Emit("hook-event", map[string]any{"hook": "updateActor", "args": []any{}}); err != nil {
		t.Fatalf("the tabletop's connection did not survive: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if !e.svc.Hub().Online(clientID) {
		t.Fatal("the world went offline after its reader was released")
	}
}

func TestDisconnectFailsEveryPendingRequestAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.ReplyTimeout = time.Minute })
	arrived := make(chan struct{}, 10)
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = func(ctx context.Context, _ linktest.Request) (any, bool) {
			arrived <- struct{}{}
			<-ctx.Done()
			return nil, false
		}
	})
	clientID, _ := tt.Credentials()
	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := e.svc.Hub().Call(context.Background(), clientID, "entity", nil)
			errs <- err
		}()
	}
	for range n {
		<-arrived
	}
	tt.Drop()
	for range n {
		select {
		case err := <-errs:
			var werr *world.Error
			if !errors.Is(err, link.ErrDisconnected) || !errors.As(err, &werr) || werr.Kind != world.ErrUnavailable {
				t.Fatalf("pending request: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a pending request still waits after the disconnection (reply time-out is a minute)")
		}
	}
	// Not connected now: refused at once, with the contract's message.
	_, err := e.svc.Hub().Call(context.Background(), clientID, "entity", nil)
	var werr *world.Error
	if !errors.Is(err, link.ErrNotConnected) || !errors.As(err, &werr) || werr.Kind != world.ErrUnavailable ||
		err.Error() != "world "+clientID+" is not connected" {
		t.Fatalf("call to a disconnected world: %v", err)
	}
}

func TestLateRepliesAreDroppedAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.ReplyTimeout = 100 * time.Millisecond })
	release := make(chan struct{})
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = linktest.ByType(map[string]linktest.Handler{
			"entity": func(ctx context.Context, req linktest.Request) (any, bool) {
				<-release
				return map[string]any{"data": "late"}, true
			},
		})
	})
	clientID, _ := tt.Credentials()
	hub := e.svc.Hub()
	// A type the tabletop has no handler for gets no reply at all, as with
	// the module: the relay's time-out answers.
	if _, err := hub.Call(context.Background(), clientID, "no-such-type", nil); !errors.Is(err, link.ErrTimeout) {
		t.Fatalf("call of an unhandled type: %v", err)
	}
	_, err := hub.Call(context.Background(), clientID, "entity", nil)
	var werr *world.Error
	if !errors.Is(err, link.ErrTimeout) || !errors.As(err, &werr) || werr.Kind != world.ErrTimeout ||
		err.Error() != "world "+clientID+" did not answer entity within 100ms" {
		t.Fatalf("call without a reply: %v", err)
	}
	close(release)
	e.wait("the late reply to be counted", func() bool { return hub.Stats().LateReplies == 1 })
	// A reply to an id the relay never sent is dropped too.
	if err := tt.Send([]byte(`{"type":"entity-result","requestId":"entity_999999999","data":{}}`)); err != nil {
		t.Fatal(err)
	}
	e.wait("the stray reply to be counted", func() bool { return hub.Stats().LateReplies == 2 })
	if s := hub.Stats(); s.Timeouts != 2 || s.Replies != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestManyRequestsInFlightOnOneConnection(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t)
	var (
		mu      sync.Mutex
		waiting int
		all     = make(chan struct{})
	)
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = func(ctx context.Context, req linktest.Request) (any, bool) {
			var p struct {
				Type      string `json:"type"`
				RequestID string `json:"requestId"`
				N         int    `json:"n"`
			}
			if err := req.Params(&p); err != nil || p.Type != "echo" || p.RequestID != req.RequestID {
				return map[string]any{"error": "bad request"}, true
			}
			// Every request waits until all of them arrived, so all n
			// are in flight at once.
			mu.Lock()
			waiting++
			if waiting == n {
				close(all)
			}
			mu.Unlock()
			select {
			case <-all:
			case <-ctx.Done():
			}
			return map[string]any{"n": p.N}, true
		}
	})
	clientID, _ := tt.Credentials()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// params may not replace type or requestId.
			raw, err := e.svc.Hub().Call(context.Background(), clientID, "echo", map[string]any{"n": i, "type": "evil", "requestId": "x"})
			if err != nil {
				errs <- err
				return
			}
			var r struct {
				Type string `json:"type"`
				N    int    `json:"n"`
			}
			if err := json.Unmarshal(raw, &r); err != nil || r.Type != "echo-result" || r.N != i {
				errs <- errors.New("wrong reply: " + string(raw))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if s := e.svc.Hub().Stats(); s.Replies != n || s.LateReplies != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestLimitsOfOneConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.MaxPending = 2; c.Hub.MaxMessageBytes = 1024 })
	block := make(chan struct{})
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = func(ctx context.Context, _ linktest.Request) (any, bool) {
			select {
			case <-block:
			case <-ctx.Done():
			}
			return map[string]any{}, true
		}
	})
	clientID, _ := tt.Credentials()
	hub := e.svc.Hub()
	for range 2 {
		go func() { _, _ = hub.Call(context.Background(), clientID, "entity", nil) }()
	}
	e.wait("two requests in flight", func() bool { return hub.Stats().Calls == 2 })
	time.Sleep(20 * time.Millisecond) // let both register as pending
	_, err := hub.Call(context.Background(), clientID, "entity", nil)
	if !errors.Is(err, link.ErrBusy) {
		t.Fatalf("third request over a limit of 2: %v", err)
	}
	close(block)
	// A message over the size limit closes the connection with 1009.
	if err := tt.Send([]byte(`{"type":"hook-event","data":"` + strings.Repeat("x", 2000) + `"}`)); err != nil {
		t.Fatal(err)
	}
	e.wait("the connection to close", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseTooBig {
		t.Fatalf("closed with %d, want 1009", tt.LastClose())
	}
}

func TestReconnectAfterDropResendsChannels(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tt := e.tabletop()
	if _, err := tt.Pair(ctx, e.code("")); err != nil {
		t.Fatal(err)
	}
	clientID, _ := tt.Credentials()
	hub := e.svc.Hub()
	// A subscriber waits before the world connects.
	if err := hub.SetChannel(clientID, "actor-events", 1); err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- tt.Run(ctx) }()
	waitCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool { return tt.Channels()["actor-events"] }); err != nil {
		t.Fatal("the channel was not turned on at connection")
	}
	if err := hub.SetChannel(clientID, "hooks", 2); err != nil {
		t.Fatal(err)
	}
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool { return tt.Channels()["hooks"] }); err != nil {
		t.Fatal("hooks not turned on")
	}
	if err := hub.SetChannel(clientID, "actor-events", 0); err != nil {
		t.Fatal(err)
	}
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool { return !tt.Channels()["actor-events"] }); err != nil {
		t.Fatal("actor-events not turned off")
	}
	if err := hub.SetChannel(clientID, "no-such-channel", 1); err == nil {
		t.Fatal("unknown channel accepted")
	}

	tt.Drop()
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool { return tt.Authentications() == 2 && tt.Connected() }); err != nil {
		t.Fatal("no reconnection")
	}
	e.wait("the world to be online again", func() bool { return hub.Online(clientID) })
	// The new connection hears the channel that has subscribers again.
	resent := func(tt *linktest.Tabletop) int {
		n := 0
		for _, m := range tt.Received() {
			if strings.Contains(string(m), `"channel":"hooks","count":2`) {
				n++
			}
		}
		return n
	}
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool { return resent(tt) == 2 }); err != nil {
		t.Fatalf("hooks turned on %d times, want once per connection", resent(tt))
	}
	if tt.Channels()["actor-events"] {
		t.Fatal("a channel without subscribers was turned on again")
	}
	cancel()
	if err := <-ran; !errors.Is(err, context.Canceled) {
		t.Fatalf("run: %v", err)
	}
}

func TestAddressLimits(t *testing.T) {
	t.Parallel()
	pairs, fails := &countLimiter{max: 2}, &countLimiter{max: 2}
	e := newEnv(t, func(c *link.Config) { c.PairAttempts, c.AuthFailures = pairs, fails })
	ctx := context.Background()
	// Every pairing attempt counts, good or bad: the third is refused
	// even with a good code.
	_, _ = e.tabletop().Pair(ctx, "AAAAAA")
	tt := e.tabletop()
	if _, err := tt.Pair(ctx, e.code("")); err != nil {
		t.Fatal(err)
	}
	var he *linktest.HTTPError
	if _, err := e.tabletop().Pair(ctx, e.code("")); !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("third pairing attempt: %v", err)
	}
	// Failed token uses count; once blocked, even a good token waits.
	bad := e.tabletop()
	clientID, token := tt.Credentials()
	bad.SetCredentials(clientID, "rlt_"+strings.Repeat("C", 43))
	for range 2 {
		if err := bad.Connect(ctx); closeCode(t, err) != link.CloseAuthFailed {
			t.Fatalf("bad token: %v", err)
		}
	}
	good := e.tabletop()
	good.SetCredentials(clientID, token)
	if err := good.Connect(ctx); !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("good token from a blocked address: %v", err)
	}
	if _, err := good.Active(ctx); !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("probe from a blocked address: %v", err)
	}
}

// countLimiter allows max units per address, forever.
type countLimiter struct {
	mu   sync.Mutex
	max  int
	used map[string]int
}

func (l *countLimiter) Allow(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.used == nil {
		l.used = map[string]int{}
	}
	if l.used[addr] >= l.max {
		return false, time.Minute
	}
	l.used[addr]++
	return true, 0
}

func (l *countLimiter) Blocked(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used[addr] >= l.max, time.Minute
}

func TestSlowReaderIsCutOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) {
		c.Hub.ReplyTimeout = time.Minute
		c.Hub.PingInterval = time.Minute // the write time-out must do it alone
		// Long enough for every request to be queued while the writer
		// is stuck, so that the queue fills whatever the machine's pace
		// (with both cores busy, starting the callers took over 2 s).
		c.Hub.WriteTimeout = 5 * time.Second
		c.Hub.SendQueue = 1 // raised to the smallest queue that works
	})
	tt := e.connected(func(c *linktest.Config) { c.ReadBuffer = 64 << 10 })
	clientID, _ := tt.Credentials()
	// The tabletop stops reading; the relay sends megabyte requests until
	// the socket's buffers are full and a write stalls; then its queue
	// fills, and further requests are refused at once; then the write
	// time-out closes the connection, failing what was queued.
	tt.Freeze()
	defer tt.Thaw()
	big := map[string]string{"data": strings.Repeat("x", 1<<20)}
	const n = 30
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := e.svc.Hub().Call(context.Background(), clientID, "upload-file", big)
			errs <- err
		}()
	}
	busy, gone := 0, 0
	for range n {
		select {
		case err := <-errs:
			switch {
			case errors.Is(err, link.ErrBusy):
				busy++
			case errors.Is(err, link.ErrDisconnected), errors.Is(err, link.ErrNotConnected):
				gone++
			default:
				t.Fatalf("request to a world that does not read: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatal("a request still waits on a world that does not read (reply time-out is a minute)")
		}
	}
	if busy == 0 || gone == 0 {
		t.Fatalf("%d refused as busy, %d failed with the connection; want some of each", busy, gone)
	}
	if e.svc.Hub().Online(clientID) {
		t.Fatal("the world that does not read is still online")
	}
}

// TestAllChannelsInACluster: with AllChannels (a cluster, whose other
// nodes' subscribers this node cannot count) every channel is on from the
// connection, and stays on when the last subscriber here leaves.
func TestAllChannelsInACluster(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.AllChannels = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tt := e.tabletop()
	if _, err := tt.Pair(ctx, e.code("")); err != nil {
		t.Fatal(err)
	}
	clientID, _ := tt.Credentials()
	ran := make(chan error, 1)
	go func() { ran <- tt.Run(ctx) }()
	waitCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	all := func(tt *linktest.Tabletop) bool {
		for _, ch := range link.Channels {
			if !tt.Channels()[ch] {
				return false
			}
		}
		return true
	}
	if err := tt.WaitFor(waitCtx, all); err != nil {
		t.Fatalf("channels at connection: %v, want all on", tt.Channels())
	}
	hub := e.svc.Hub()
	if err := hub.SetChannel(clientID, "hooks", 1); err != nil {
		t.Fatal(err)
	}
	if err := hub.SetChannel(clientID, "hooks", 0); err != nil {
		t.Fatal(err)
	}
	if n := hub.Channel(clientID, "hooks"); n != 1 {
		t.Fatalf("hooks count %d after the last subscriber left, want it kept on (1)", n)
	}
	cancel()
	<-ran
}
