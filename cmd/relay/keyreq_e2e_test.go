package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// openKeyRequest opens a key request and returns its answer.
func openKeyRequest(t *testing.T, r *relaytest.Relay, body map[string]any) map[string]any {
	t.Helper()
	resp := r.Do("POST", "/auth/key-request", "", nil, body)
	if resp.Status != http.StatusCreated {
		t.Fatalf("open key request: %d %s", resp.Status, resp.Body)
	}
	return resp.JSON(t)
}

// strings of a JSON array.
func jsonStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}

// TestKeyRequestDeviceFlow walks the device flow: a tool asks for two
// scopes, the game master grants one of them, the tool's poll gets the
// key exactly once, and the key works with exactly the scope granted.
func TestKeyRequestDeviceFlow(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	ans := openKeyRequest(t, r, map[string]any{"appName": "Dice bot", "appDescription": "Rolls for the table",
		"appUrl": "https://bot.example.org", "scopes": []string{"entity:read", "entity:write"}, "clientIds": []string{"demo"}})
	code, _ := ans["code"].(string)
	if len(code) != link.CodeLength || strings.Trim(code, link.CodeAlphabet) != "" {
		t.Fatalf("code %q: want %d characters of %s", code, link.CodeLength, link.CodeAlphabet)
	}
	if ans["approvalUrl"] != r.Base+"/console/?key-request="+code || ans["expiresIn"] != float64(600) || ans["expiresAt"] == "" {
		t.Fatalf("answer %v", ans)
	}
	status := func() relaytest.Response { return r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil) }
	if s := status(); s.Status != http.StatusOK || string(s.Body) != `{"status":"pending"}` {
		t.Fatalf("pending status: %d %s", s.Status, s.Body)
	}

	// The approver sees the request; nobody without an admin key does.
	if resp := r.Do("GET", "/auth/key-request/"+code, "", nil, nil); resp.Status != http.StatusUnauthorized {
		t.Fatalf("show without a key: %d %s", resp.Status, resp.Body)
	}
	reader, _ := r.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}})
	if resp := r.Do("GET", "/auth/key-request/"+code, reader, nil, nil); resp.Status != http.StatusForbidden || resp.ErrorText(t) != "API key lacks required scope: admin" {
		t.Fatalf("show with a key without admin: %d %s", resp.Status, resp.Body)
	}
	shown := r.Do("GET", "/auth/key-request/"+code, r.AdminKey, nil, nil)
	if shown.Status != http.StatusOK {
		t.Fatalf("show: %d %s", shown.Status, shown.Body)
	}
	if d := shown.JSON(t); d["appName"] != "Dice bot" || d["status"] != "pending" || !slices.Equal(jsonStrings(d["requestedScopes"]), []string{"entity:read", "entity:write"}) ||
		!slices.Equal(jsonStrings(d["clientIds"]), []string{"demo"}) || d["appUrl"] != "https://bot.example.org" {
		t.Fatalf("shown %s", shown.Body)
	}

	// Scopes can only be narrowed; a refused approval changes nothing.
	resp := r.Do("POST", "/auth/key-request/"+code+"/approve", r.AdminKey, nil, map[string]any{"scopes": []string{"entity:read", "admin"}})
	if resp.Status != http.StatusBadRequest || resp.ErrorText(t) != "Cannot grant scope not in original request: admin" {
		t.Fatalf("approve with a wider scope: %d %s", resp.Status, resp.Body)
	}
	if s := status(); string(s.Body) != `{"status":"pending"}` {
		t.Fatalf("status after a refused approval: %s", s.Body)
	}
	resp = r.Do("POST", "/auth/key-request/"+code+"/approve", r.AdminKey, nil, map[string]any{"scopes": []string{"entity:read"}})
	if resp.Status != http.StatusOK || resp.JSON(t)["success"] != true || resp.JSON(t)["keyId"] == "" || resp.JSON(t)["exchangeCode"] != nil {
		t.Fatalf("approve: %d %s", resp.Status, resp.Body)
	}
	keyID := resp.JSON(t)["keyId"].(string)
	if again := r.Do("POST", "/auth/key-request/"+code+"/approve", r.AdminKey, nil, nil); again.Status != http.StatusBadRequest || again.ErrorText(t) != "Key request is not pending" {
		t.Fatalf("approve twice: %d %s", again.Status, again.Body)
	}

	got := status()
	d := got.JSON(t)
	apiKey, _ := d["apiKey"].(string)
	if got.Status != http.StatusOK || d["status"] != "approved" || apiKey == "" || !slices.Equal(jsonStrings(d["scopes"]), []string{"entity:read"}) ||
		!slices.Equal(jsonStrings(d["clientIds"]), []string{"demo"}) {
		t.Fatalf("approved status: %d %s", got.Status, got.Body)
	}
	if s := status(); s.Status != http.StatusOK || string(s.Body) != `{"status":"exchanged"}` {
		t.Fatalf("status after delivery: %d %s", s.Status, s.Body)
	}

	// The key is the one the approval made, with exactly the granted scope,
	// recorded as made by the approving key.
	if g := r.Do("GET", "/get", apiKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil); g.Status != http.StatusOK {
		t.Fatalf("read with the granted key: %d %s", g.Status, g.Body)
	}
	if u := r.Do("PUT", "/update", apiKey, relaytest.Q("clientId", "demo"), map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": "x"}}); u.Status != http.StatusForbidden {
		t.Fatalf("write with a key granted only entity:read: %d %s", u.Status, u.Body)
	}
	list := r.Do("GET", "/keys", r.AdminKey, nil, nil)
	if !strings.Contains(string(list.Body), keyID) || !strings.Contains(string(list.Body), `"name":"Dice bot"`) {
		t.Fatalf("key %s is not listed: %s", keyID, list.Body)
	}
}

// TestKeyRequestApproverBounds shows that an approval makes the key as the
// approving key: an admin key bound to one world cannot grant a key for
// every world, and the request stays pending for a key that can.
func TestKeyRequestApproverBounds(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	bound, _ := r.NewKey(&relayv1.CreateKeyRequest{Name: "demo admin", Scopes: []string{"all"}, ClientIds: []string{"demo"}})
	code := openKeyRequest(t, r, map[string]any{"appName": "Tool", "scopes": []string{"entity:read"}})["code"].(string)
	resp := r.Do("POST", "/auth/key-request/"+code+"/approve", bound, nil, nil)
	if resp.Status != http.StatusForbidden || !strings.Contains(resp.ErrorText(t), "may only create keys for its own worlds") {
		t.Fatalf("approve beyond the approver's worlds: %d %s", resp.Status, resp.Body)
	}
	if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
		t.Fatalf("status after a refused approval: %s", s.Body)
	}
	resp = r.Do("POST", "/auth/key-request/"+code+"/approve", bound, nil, map[string]any{"clientIds": []string{"demo"}, "userId": relaytest.AliceID})
	if resp.Status != http.StatusOK {
		t.Fatalf("approve within the approver's worlds: %d %s", resp.Status, resp.Body)
	}
	d := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil).JSON(t)
	if !slices.Equal(jsonStrings(d["clientIds"]), []string{"demo"}) {
		t.Fatalf("granted worlds: %v", d)
	}
}

// TestKeyRequestWebFlow: with a callbackUrl, the approval answers an
// exchange code, the key is handed over only for it and only once, and
// the status poll never shows it.
func TestKeyRequestWebFlow(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	code := openKeyRequest(t, r, map[string]any{"appName": "Web tool", "scopes": []string{"entity:read"},
		"callbackUrl": "https://tool.example.org/callback"})["code"].(string)
	resp := r.Do("POST", "/auth/key-request/"+code+"/approve", r.AdminKey, nil, map[string]any{})
	exchange, _ := resp.JSON(t)["exchangeCode"].(string)
	if resp.Status != http.StatusOK || exchange == "" || resp.JSON(t)["callbackUrl"] != "https://tool.example.org/callback" {
		t.Fatalf("approve: %d %s", resp.Status, resp.Body)
	}
	if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"approved"}` {
		t.Fatalf("status of an approved web-flow request: %s", s.Body)
	}
	if x := r.Do("POST", "/auth/key-request/exchange", "", nil, map[string]any{"code": code + ".00"}); x.Status != http.StatusNotFound || x.ErrorText(t) != "Invalid exchange code" {
		t.Fatalf("exchange with a wrong code: %d %s", x.Status, x.Body)
	}
	x := r.Do("POST", "/auth/key-request/exchange", "", nil, map[string]any{"code": exchange})
	apiKey, _ := x.JSON(t)["apiKey"].(string)
	if x.Status != http.StatusOK || apiKey == "" {
		t.Fatalf("exchange: %d %s", x.Status, x.Body)
	}
	if g := r.Do("GET", "/get", apiKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil); g.Status != http.StatusOK {
		t.Fatalf("read with the exchanged key: %d %s", g.Status, g.Body)
	}
	if x := r.Do("POST", "/auth/key-request/exchange", "", nil, map[string]any{"code": exchange}); x.Status != http.StatusGone ||
		x.ErrorText(t) != "Exchange code has already been used or request was denied" {
		t.Fatalf("exchange twice: %d %s", x.Status, x.Body)
	}
	if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"exchanged"}` {
		t.Fatalf("status after the exchange: %s", s.Body)
	}
}

// TestKeyRequestDeny: a denied request says so, makes no key and cannot be
// approved any more.
func TestKeyRequestDeny(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	listKeys := func() string {
		b, _ := json.Marshal(r.Do("GET", "/keys", r.AdminKey, nil, nil).Data(t)["keys"])
		return string(b)
	}
	before := listKeys()
	code := openKeyRequest(t, r, map[string]any{"appName": "Tool", "scopes": []string{"entity:read"}})["code"].(string)
	if resp := r.Do("POST", "/auth/key-request/"+code+"/deny", r.AdminKey, nil, nil); resp.Status != http.StatusOK || resp.JSON(t)["success"] != true {
		t.Fatalf("deny: %d %s", resp.Status, resp.Body)
	}
	if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); s.Status != http.StatusOK || string(s.Body) != `{"status":"denied"}` {
		t.Fatalf("status: %d %s", s.Status, s.Body)
	}
	for _, action := range []string{"approve", "deny"} {
		if resp := r.Do("POST", "/auth/key-request/"+code+"/"+action, r.AdminKey, nil, nil); resp.Status != http.StatusBadRequest || resp.ErrorText(t) != "Key request is not pending" {
			t.Fatalf("%s after deny: %d %s", action, resp.Status, resp.Body)
		}
	}
	if after := listKeys(); after != before {
		t.Fatalf("a denied request changed the keys:\n%s\n%s", before, after)
	}
}

// TestKeyRequestBadInput: every bad request is refused naming what is
// wrong, and unknown codes are 404 on every endpoint.
func TestKeyRequestBadInput(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	for _, c := range []struct {
		name string
		body any
		want string
	}{
		{"no appName", map[string]any{"scopes": []string{"entity:read"}}, "appName and scopes are required"},
		{"no scopes", map[string]any{"appName": "x"}, "appName and scopes are required"},
		{"unknown scope", map[string]any{"appName": "x", "scopes": []string{"entity:read", "root"}}, "Invalid scope: root"},
		{"scopes not an array", map[string]any{"appName": "x", "scopes": "entity:read"}, "'scopes' must be an array of strings"},
		{"appUrl not http", map[string]any{"appName": "x", "scopes": []string{"entity:read"}, "appUrl": "javascript:alert(1)"}, "Invalid appUrl: must be an http:// or https:// URL"},
		{"callbackUrl not http", map[string]any{"appName": "x", "scopes": []string{"entity:read"}, "callbackUrl": "ftp://x.org/"}, "Invalid callbackUrl: must be an http:// or https:// URL"},
		{"appName too long", map[string]any{"appName": strings.Repeat("a", 101), "scopes": []string{"entity:read"}}, "'appName' is longer than 100 characters"},
		{"bad clientId", map[string]any{"appName": "x", "scopes": []string{"entity:read"}, "clientIds": []string{"a b"}}, "'clientIds' holds a malformed client id: a b"},
		{"not JSON", "{", "The request body must be a JSON object"},
	} {
		resp := r.Do("POST", "/auth/key-request", "", nil, c.body)
		if resp.Status != http.StatusBadRequest || resp.ErrorText(t) != c.want {
			t.Errorf("%s: %d %s, want 400 %q", c.name, resp.Status, resp.Body, c.want)
		}
	}
	if resp := r.Do("POST", "/auth/pair-request", "", nil, map[string]any{"worldTitle": "x"}); resp.Status != http.StatusBadRequest || resp.ErrorText(t) != "worldId is required" {
		t.Errorf("pair request without worldId: %d %s", resp.Status, resp.Body)
	}
	// A key request's code is unknown to the pair requests and the other
	// way round; so is a malformed one.
	keyCode := openKeyRequest(t, r, map[string]any{"appName": "x", "scopes": []string{"entity:read"}})["code"].(string)
	for _, c := range []struct{ method, path, key, want string }{
		{"GET", "/auth/pair-request/" + keyCode + "/status", "", "Pair request not found"},
		{"GET", "/auth/key-request/ZZZZZZ/status", "", "Key request not found"},
		{"GET", "/auth/key-request/nope/status", "", "Key request not found"},
		{"GET", "/auth/key-request/ZZZZZZ", r.AdminKey, "Key request not found"},
		{"POST", "/auth/key-request/ZZZZZZ/approve", r.AdminKey, "Key request not found"},
		{"POST", "/auth/pair-request/" + keyCode + "/approve", r.AdminKey, "Pair request not found"},
	} {
		if resp := r.Do(c.method, c.path, c.key, nil, nil); resp.Status != http.StatusNotFound || resp.ErrorText(t) != c.want {
			t.Errorf("%s %s: %d %s, want 404 %q", c.method, c.path, resp.Status, resp.Body, c.want)
		}
	}
	if resp := r.Do("POST", "/auth/key-request/"+keyCode+"/approve", r.AdminKey, nil, map[string]any{"expiresAt": "tomorrow"}); resp.Status != http.StatusBadRequest ||
		resp.ErrorText(t) != "'expiresAt' must be an RFC 3339 time: tomorrow" {
		t.Errorf("approve with a bad expiresAt: %d %s", resp.Status, resp.Body)
	}
	if resp := r.Do("POST", "/auth/key-request/"+keyCode+"/approve", "rk_bogus", nil, nil); resp.Status != http.StatusUnauthorized {
		t.Errorf("approve with a bad key: %d %s", resp.Status, resp.Body)
	}
	if s := r.Do("GET", "/auth/key-request/"+keyCode+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
		t.Errorf("the refused approvals changed the request: %s", s.Body)
	}
}

// TestKeyRequestRateLimits: opening requests and polling them are limited
// per address, with 429 and Retry-After.
func TestKeyRequestRateLimits(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t, func(c *node.Config) {
		c.RequestRateLimit, c.RequestPollLimit, c.MetricsListen = 2, 3, "127.0.0.1:0"
	})
	var code string
	for range 2 {
		code = openKeyRequest(t, r, map[string]any{"appName": "x", "scopes": []string{"entity:read"}})["code"].(string)
	}
	third := r.Do("POST", "/auth/pair-request", "", nil, map[string]any{"worldId": "w"})
	if third.Status != http.StatusTooManyRequests || third.Header.Get("Retry-After") == "" {
		t.Fatalf("third request in a minute: %d %s", third.Status, third.Body)
	}
	for i := range 3 {
		if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); s.Status != http.StatusOK {
			t.Fatalf("poll %d: %d %s", i+1, s.Status, s.Body)
		}
	}
	if s := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); s.Status != http.StatusTooManyRequests || s.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth poll in a minute: %d %s", s.Status, s.Body)
	}
	resp, err := http.Get("http://" + r.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	metrics, _ := io.ReadAll(resp.Body)
	for _, want := range []string{`relay_rate_limit_refusals_total{limit="requests"} 1`, `relay_rate_limit_refusals_total{limit="request_polls"} 1`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
}

// TestPairRequestSimulator walks the module's pairing by approval end to
// end: the simulated tabletop opens a pair request, the game master
// approves it through the API, the tabletop's poll gets a pairing code,
// trades it at /auth/pair, connects, and the world is online.
func TestPairRequestSimulator(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tt := linktest.New(linktest.Config{RelayURL: r.Base, WorldID: "w-approve", WorldTitle: "Approved World", SystemID: "dnd5e",
		SystemTitle: "D&D 5e", SystemVersion: "5.0.4", FoundryVersion: "13.345", ServerFingerprint: "fp-approve", ReconnectMaxAttempts: 1})
	var pr linktest.PairRequest
	approved := make(chan relaytest.Response, 1)
	res, err := tt.PairByRequest(ctx, 50*time.Millisecond, func(p linktest.PairRequest) {
		pr = p
		// Before the approval, the status says nothing but the status.
		if s := r.Do("GET", "/auth/pair-request/"+p.Code+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
			t.Errorf("pending status: %s", s.Body)
		}
		shown := r.Do("GET", "/auth/pair-request/"+p.Code, r.AdminKey, nil, nil).JSON(t)
		if shown["worldTitle"] != "Approved World" || shown["systemId"] != "dnd5e" || shown["foundryVersion"] != "13.345" {
			t.Errorf("shown: %v", shown)
		}
		go func() {
			time.Sleep(150 * time.Millisecond) // a few polls see it pending
			approved <- r.Do("POST", "/auth/pair-request/"+p.Code+"/approve", r.AdminKey, nil, nil)
		}()
	})
	if err != nil {
		t.Fatalf("pair by request: %v", err)
	}
	if a := <-approved; a.Status != http.StatusOK || a.JSON(t)["success"] != true {
		t.Fatalf("approve: %d %s", a.Status, a.Body)
	}
	if pr.PairURL != r.Base+"/console/?pair-request="+pr.Code {
		t.Fatalf("pairUrl %q", pr.PairURL)
	}
	if s := r.Do("GET", "/auth/pair-request/"+pr.Code+"/status", "", nil, nil); string(s.Body) != `{"status":"exchanged"}` {
		t.Fatalf("status after the pairing code was fetched: %s", s.Body)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	if err := tt.WaitFor(ctx, func(tt *linktest.Tabletop) bool { return tt.Connected() }); err != nil {
		t.Fatal(err)
	}
	if !r.Links().Hub().Online(res.ClientID) {
		t.Fatalf("world %s is not online", res.ClientID)
	}

	// A denied request ends the module's polling.
	other := linktest.New(linktest.Config{RelayURL: r.Base, WorldID: "w-deny", ServerFingerprint: "fp-deny", ReconnectMaxAttempts: 1})
	_, err = other.PairByRequest(ctx, 50*time.Millisecond, func(p linktest.PairRequest) {
		if d := r.Do("POST", "/auth/pair-request/"+p.Code+"/deny", r.AdminKey, nil, nil); d.Status != http.StatusOK {
			t.Errorf("deny: %d %s", d.Status, d.Body)
		}
	})
	var end *linktest.PairRequestEnd
	if !errors.As(err, &end) || end.Status != "denied" {
		t.Fatalf("pairing a denied request: %v", err)
	}
}

// TestKeyRequestCodeNotLogged: a request's code fetches its key once it is
// approved, so the access log shows its route, never the code, and the
// key itself appears nowhere in the log.
func TestKeyRequestCodeNotLogged(t *testing.T) {
	t.Parallel()
	var logged lockedBuffer
	r := startTestRelayLogged(t, slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	code := openKeyRequest(t, r.Relay, map[string]any{"appName": "bot", "scopes": []string{"entity:read"}})["code"].(string)
	r.Do("GET", "/auth/key-request/"+code, r.AdminKey, nil, nil)
	r.Do("POST", "/auth/key-request/"+code+"/approve", r.AdminKey, nil, nil)
	apiKey, _ := r.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil).JSON(t)["apiKey"].(string)
	if apiKey == "" {
		t.Fatal("no key delivered")
	}
	out := logged.String()
	if !strings.Contains(out, "path=/auth/key-request/{code}/status") {
		t.Fatalf("no access line of the status poll:\n%s", out)
	}
	if strings.Contains(out, code) || strings.Contains(out, apiKey) {
		t.Fatalf("the log shows the request's code or its key:\n%s", out)
	}
}

// TestPairRequestApproverBounds: a pair request's pairing code is made as
// `POST /pairing-codes` with the approving key would make it, so a key
// bound to worlds cannot approve the pairing of a new world, and the
// request stays pending for a key that can.
func TestPairRequestApproverBounds(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	bound, _ := r.NewKey(&relayv1.CreateKeyRequest{Name: "demo admin", Scopes: []string{"all"}, ClientIds: []string{"demo"}})
	resp := r.Do("POST", "/auth/pair-request", "", nil, map[string]any{"worldId": "w"})
	code := resp.JSON(t)["code"].(string)
	a := r.Do("POST", "/auth/pair-request/"+code+"/approve", bound, nil, nil)
	if a.Status != http.StatusForbidden || !strings.Contains(a.ErrorText(t), "may not pair a new world") {
		t.Fatalf("approve by a key bound to worlds: %d %s", a.Status, a.Body)
	}
	if s := r.Do("GET", "/auth/pair-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
		t.Fatalf("status after a refused approval: %s", s.Body)
	}
	if a := r.Do("POST", "/auth/pair-request/"+code+"/approve", r.AdminKey, nil, nil); a.Status != http.StatusOK {
		t.Fatalf("approve by the admin key: %d %s", a.Status, a.Body)
	}
}
