package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
)

// tabletop returns an unpaired simulated tabletop for the relay whose
// handler echoes every request's type.
func (tr *testRelay) tabletop(mutate ...func(*linktest.Config)) *linktest.Tabletop {
	cfg := linktest.Config{RelayURL: tr.Base, WorldID: "tavern-tales", WorldTitle: "Tavern Tales",
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemVersion: "5.0.4", ServerFingerprint: "fp-e2e",
		Players: []link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true}},
		Handler: func(_ context.Context, req linktest.Request) (any, bool) {
			return map[string]any{"data": map[string]any{"echo": req.Type}}, true
		}}
	for _, m := range mutate {
		m(&cfg)
	}
	return linktest.New(cfg)
}

// pairingCode creates a pairing code over REST with the given key.
func (tr *testRelay) pairingCode(key, clientID string) relaytest.Response {
	tr.t.Helper()
	body := map[string]any{}
	if clientID != "" {
		body["clientId"] = clientID
	}
	return tr.Do(http.MethodPost, "/pairing-codes", key, nil, body)
}

// linkedTabletop pairs a tabletop with a code from the admin key and
// connects it.
func (tr *testRelay) linkedTabletop(mutate ...func(*linktest.Config)) *linktest.Tabletop {
	tr.t.Helper()
	r := tr.pairingCode(tr.AdminKey, "")
	if r.Status != http.StatusOK {
		tr.t.Fatalf("pairing code: %d %s", r.Status, r.Body)
	}
	tt := tr.tabletop(mutate...)
	if _, err := tt.Pair(context.Background(), r.Data(tr.t)["code"].(string)); err != nil {
		tr.t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		tr.t.Fatal(err)
	}
	tr.t.Cleanup(tt.Drop)
	return tt
}

// TestLinkPairConnectCallUnpair walks a game master's whole path on the
// real relay: an admin creates a pairing code over REST, the module trades
// it for a token without any API key, connects to /relay on the relay's
// one address, answers a request, and is unpaired over REST.
func TestLinkPairConnectCallUnpair(t *testing.T) {
	t.Parallel()
	// Short idle and header time-outs: the socket, once upgraded, is no
	// longer the HTTP server's, and must outlive them.
	tr := startTestRelay(t, func(c *node.Config) { c.IdleTimeout = 100 * time.Millisecond })
	ctx := context.Background()

	r := tr.pairingCode(tr.AdminKey, "")
	if r.Status != http.StatusOK {
		t.Fatalf("POST /pairing-codes: %d %s", r.Status, r.Body)
	}
	env := r.JSON(t)
	d := r.Data(t)
	code, _ := d["code"].(string)
	if env["type"] != "create-pairing-code-result" || len(code) != link.CodeLength || d["expiresIn"] != float64(600) || d["clientId"] != "" {
		t.Fatalf("pairing code answer %s", r.Body)
	}
	if exp, err := time.Parse(time.RFC3339, d["expiresAt"].(string)); err != nil || time.Until(exp) < 9*time.Minute {
		t.Fatalf("expiresAt %v %v", d["expiresAt"], err)
	}

	tt := tr.tabletop()
	res, err := tt.Pair(ctx, code)
	if err != nil {
		t.Fatalf("POST /auth/pair: %v", err)
	}
	if res.RelayURL != "ws://"+tr.Addr()+"/relay" {
		t.Fatalf("relayUrl %q", res.RelayURL)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer tt.Drop()
	hub := tr.Links().Hub()
	if !hub.Online(res.ClientID) {
		t.Fatal("the world is not online")
	}
	if active, err := tt.Active(ctx); err != nil || !active {
		t.Fatalf("GET /api/clients/{id}/active: %v %v", active, err)
	}
	time.Sleep(300 * time.Millisecond) // past the idle time-out
	raw, err := hub.Call(ctx, res.ClientID, "world-info", nil)
	if err != nil || !strings.Contains(string(raw), `"echo":"world-info"`) {
		t.Fatalf("call: %s %v", raw, err)
	}
	info, _ := hub.Info(res.ClientID)
	if info.WorldTitle != "Tavern Tales" || info.SystemID != "dnd5e" || info.FoundryVersion != "13.345" {
		t.Fatalf("connection info %+v", info)
	}

	// Unpair over REST: the token is revoked and the socket closed with
	// 1008, after which the module forgets its token.
	r = tr.Do(http.MethodDelete, "/linked-worlds/"+res.ClientID, tr.AdminKey, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("DELETE /linked-worlds: %d %s", r.Status, r.Body)
	}
	if d := r.Data(t); r.JSON(t)["type"] != "unpair-world-result" || d["clientId"] != res.ClientID ||
		d["revokedTokens"] != float64(1) || d["disconnected"] != true {
		t.Fatalf("unpair answer %s", r.Body)
	}
	waitFor(t, "the socket to close", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseAuthFailed {
		t.Fatalf("closed with %d, want 1008", tt.LastClose())
	}
	if _, err := hub.Call(ctx, res.ClientID, "world-info", nil); !errors.Is(err, link.ErrNotConnected) {
		t.Fatalf("call after unpair: %v", err)
	}
	// Again: nothing left to revoke.
	r = tr.Do(http.MethodDelete, "/linked-worlds/"+res.ClientID, tr.AdminKey, nil, nil)
	if d := r.Data(t); r.Status != http.StatusOK || d["revokedTokens"] != float64(0) || d["disconnected"] != false {
		t.Fatalf("second unpair %d %s", r.Status, r.Body)
	}
	// Bad input names its parameter; an unknown world is a 404.
	for _, c := range []struct {
		path   string
		status int
		msg    string
	}{
		{"/linked-worlds/fvtt_0000000000000000", http.StatusNotFound, "Linked world not found: fvtt_0000000000000000"},
		{"/linked-worlds/a%20b", http.StatusBadRequest, "'clientId' must be a world's id (letters, digits, '_' and '-', at most 64)"},
	} {
		r := tr.Do(http.MethodDelete, c.path, tr.AdminKey, nil, nil)
		if r.Status != c.status || r.ErrorText(t) != c.msg {
			t.Errorf("DELETE %s: %d %s", c.path, r.Status, r.Body)
		}
	}
	if r := tr.pairingCode(tr.AdminKey, "demo"); r.Status != http.StatusNotFound || r.ErrorText(t) != "Linked world not found: demo" {
		t.Errorf("pairing code for an embedded world: %d %s", r.Status, r.Body)
	}
}

// TestLinkPairingOverGRPC creates a re-pairing code and unpairs over gRPC
// on the relay's address, as the CLI does.
func TestLinkPairingOverGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	tt := tr.linkedTabletop()
	clientID, _ := tt.Credentials()
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	svc := relayv1.NewLinkServiceClient(conn)
	resp, err := svc.CreatePairingCode(ctx, &relayv1.CreatePairingCodeRequest{ClientId: clientID})
	if err != nil || resp.GetClientId() != clientID || len(resp.GetCode()) != link.CodeLength || resp.GetExpiresIn() != 600 {
		t.Fatalf("CreatePairingCode: %v %v", resp, err)
	}
	// The code pairs that world again: the old connection is told to
	// reconnect with the new token.
	again := tr.tabletop(func(c *linktest.Config) { c.ServerFingerprint = "another-server" })
	res, err := again.Pair(context.Background(), resp.GetCode())
	if err != nil || res.ClientID != clientID {
		t.Fatalf("re-pair: %+v %v", res, err)
	}
	waitFor(t, "the old socket to close", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseShutdown {
		t.Fatalf("old socket closed with %d, want 4005", tt.LastClose())
	}
	u, err := svc.UnpairWorld(ctx, &relayv1.UnpairWorldRequest{ClientId: clientID})
	if err != nil || u.GetRevokedTokens() != 1 {
		t.Fatalf("UnpairWorld: %v %v", u, err)
	}
	if _, err := svc.UnpairWorld(ctx, &relayv1.UnpairWorldRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("UnpairWorld without clientId: %v", err)
	}
}

// TestLinkKeyBindings: pairing hands out a credential that answers for a
// whole world, so only keys with GM-level access to that world may pair or
// unpair it, over REST and gRPC alike, and a refusal changes nothing.
func TestLinkKeyBindings(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	tt := tr.linkedTabletop()
	linked, _ := tt.Credentials()
	ctx := context.Background()
	mk := func(spec keys.Spec) string {
		spec.Name = "k"
		plain, _, err := tr.Keys().Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	admin := []string{keys.ScopeAdmin}
	boundDemo := mk(keys.Spec{Scopes: admin, ClientIDs: []string{"demo"}})
	boundLinked := mk(keys.Spec{Scopes: admin, ClientIDs: []string{linked}})
	boundLinkedAsUser := mk(keys.Spec{Scopes: admin, ClientIDs: []string{linked}, ClientUsers: map[string]string{linked: "Gamemaster"}})
	asAlice := mk(keys.Spec{Scopes: admin, ScopedUserID: "Alice"})
	aliceElsewhere := mk(keys.Spec{Scopes: admin, ClientUsers: map[string]string{"demo": "Alice"}})
	noAdmin := mk(keys.Spec{Scopes: []string{keys.ScopeClientsRead}})

	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	svc := relayv1.NewLinkServiceClient(conn)

	for _, c := range []struct {
		name     string
		key      string
		clientID string
		status   int
		msg      string
	}{
		{"bound key, new world", boundDemo, "", http.StatusForbidden, "API key bound to worlds (demo) may not pair a new world: name one of its worlds in 'clientId' to pair it again"},
		{"bound key, another world", boundDemo, linked, http.StatusForbidden, "API key is not authorized for client '" + linked + "'"},
		{"key acting as a user, new world", asAlice, "", http.StatusForbidden, "API key acting as a tabletop user may not pair worlds"},
		{"key acting as a user, linked world", asAlice, linked, http.StatusForbidden, "API key acting as a tabletop user in world '" + linked + "' may not pair it"},
		{"key acting as a user there", boundLinkedAsUser, linked, http.StatusForbidden, "API key acting as a tabletop user in world '" + linked + "' may not pair it"},
		{"key without admin", noAdmin, "", http.StatusForbidden, "API key lacks required scope: admin"},
		{"bound key, its own world", boundLinked, linked, http.StatusOK, ""},
		{"user elsewhere only", aliceElsewhere, linked, http.StatusOK, ""},
	} {
		r := tr.pairingCode(c.key, c.clientID)
		if r.Status != c.status || (c.msg != "" && r.ErrorText(t) != c.msg) {
			t.Errorf("REST %s: %d %s", c.name, r.Status, r.Body)
		}
		gctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", c.key)
		_, err := svc.CreatePairingCode(gctx, &relayv1.CreatePairingCodeRequest{ClientId: c.clientID})
		wantCode := codes.OK
		if c.status == http.StatusForbidden {
			wantCode = codes.PermissionDenied
		}
		if status.Code(err) != wantCode || (c.msg != "" && status.Convert(err).Message() != c.msg) {
			t.Errorf("gRPC %s: %v", c.name, err)
		}
	}
	// Unpairing follows the same rule; refused unpairs leave the world
	// connected.
	for _, key := range []string{boundDemo, asAlice, boundLinkedAsUser, noAdmin} {
		if r := tr.Do(http.MethodDelete, "/linked-worlds/"+linked, key, nil, nil); r.Status != http.StatusForbidden {
			t.Errorf("unpair with a refused key: %d %s", r.Status, r.Body)
		}
	}
	if !tt.Connected() || !tr.Links().Hub().Online(linked) {
		t.Fatal("a refused unpair disconnected the world")
	}
	if r := tr.Do(http.MethodDelete, "/linked-worlds/"+linked, boundLinked, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("unpair with the world's own key: %d %s", r.Status, r.Body)
	}
}

// TestLinkEndpointsNeedNoKeyAndAreLimited: the module's endpoints are
// served next to the API without an API key; pairing attempts and failed
// token uses are limited per address, and failed tokens share the
// allowance of failed API keys.
func TestLinkEndpointsNeedNoKeyAndAreLimited(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.PairRateLimit = 3; c.AuthFailureLimit = 3 })
	ctx := context.Background()
	tt := tr.linkedTabletop() // one pairing attempt
	clientID, token := tt.Credentials()
	var he *linktest.HTTPError
	if _, err := tr.tabletop().Pair(ctx, "ZZZZZZ"); !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("bad code: %v", err)
	}
	if _, err := tr.tabletop().Pair(ctx, "ZZZZZZ"); !errors.As(err, &he) || he.Status != http.StatusUnauthorized {
		t.Fatalf("bad code: %v", err)
	}
	r := tr.pairingCode(tr.AdminKey, "")
	_, err := tr.tabletop().Pair(ctx, r.Data(t)["code"].(string))
	if !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("fourth pairing attempt with a good code: %v", err)
	}

	// Two failed tokens on /relay and one bad API key use up the address's
	// three failures: then a bad API key gets 429 instead of 401, and
	// /relay refuses even a good token before the upgrade.
	bad := tr.tabletop()
	bad.SetCredentials(clientID, "rlt_"+strings.Repeat("D", 43))
	for range 2 {
		if err := bad.Connect(ctx); err == nil {
			t.Fatal("a bad token connected")
		}
	}
	if r := tr.Do(http.MethodGet, "/clients", "rk_notakey", nil, nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("bad API key: %d", r.Status)
	}
	if r := tr.Do(http.MethodGet, "/clients", "rk_notakey", nil, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("bad API key past the shared allowance: %d %s", r.Status, r.Body)
	}
	tt.Drop()
	again := tr.tabletop()
	again.SetCredentials(clientID, token)
	if err := again.Connect(ctx); !errors.As(err, &he) || he.Status != http.StatusTooManyRequests {
		t.Fatalf("good token from a blocked address: %v", err)
	}
	// The admin key still works: a valid key is never refused.
	if r := tr.Do(http.MethodGet, "/clients", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("admin key from a blocked address: %d", r.Status)
	}
}

// TestLinkCLI pairs and unpairs with `relay worlds pair-code` and `relay
// worlds unpair`.
func TestLinkCLI(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	common := []string{"--addr", tr.Addr(), "--admin-key-file", filepath.Join(tr.DataDir, "admin.key")}
	out, errOut, err := cli(t, append([]string{"worlds", "pair-code"}, common...)...)
	if err != nil {
		t.Fatalf("pair-code: %v\n%s", err, errOut)
	}
	code := strings.TrimSpace(out)
	if len(code) != link.CodeLength || strings.Count(out, "\n") != 1 || !strings.Contains(errOut, "Pairing code for a new world") {
		t.Fatalf("pair-code printed %q / %q", out, errOut)
	}
	tt := tr.tabletop()
	res, err := tt.Pair(context.Background(), code)
	if err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer tt.Drop()
	out, errOut, err = cli(t, append([]string{"worlds", "pair-code", "--client", res.ClientID}, common...)...)
	if err != nil || len(strings.TrimSpace(out)) != link.CodeLength || !strings.Contains(errOut, res.ClientID) {
		t.Fatalf("pair-code --client: %v %q %q", err, out, errOut)
	}
	_, errOut, err = cli(t, append(append([]string{"worlds", "unpair"}, common...), res.ClientID)...)
	if err != nil || !strings.Contains(errOut, "1 connection token(s) revoked; its connection was closed") {
		t.Fatalf("unpair: %v %q", err, errOut)
	}
	if _, _, err := cli(t, append([]string{"worlds", "unpair"}, common...)...); err == nil {
		t.Fatal("unpair without a clientId succeeded")
	}
	_, errOut, err = cli(t, append(append([]string{"worlds", "unpair"}, common...), "fvtt_0000000000000000")...)
	if err == nil || !strings.Contains(err.Error(), "Linked world not found") {
		t.Fatalf("unpair unknown: %v %q", err, errOut)
	}
}

// TestLinkDisconnectAndReconnect on the real relay: requests in flight
// fail with 503's error at once when the socket drops, and the module's
// reconnection brings the world back with its event channels.
func TestLinkDisconnectAndReconnect(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.LinkReplyTimeout = time.Minute })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	arrived := make(chan struct{}, 10)
	tt := tr.tabletop(func(c *linktest.Config) {
		c.ReconnectBaseDelay = 20 * time.Millisecond
		c.Handler = func(ctx context.Context, _ linktest.Request) (any, bool) {
			arrived <- struct{}{}
			<-ctx.Done()
			return nil, false
		}
	})
	r := tr.pairingCode(tr.AdminKey, "")
	if _, err := tt.Pair(ctx, r.Data(t)["code"].(string)); err != nil {
		t.Fatal(err)
	}
	clientID, _ := tt.Credentials()
	hub := tr.Links().Hub()
	if err := hub.SetChannel(clientID, "hooks", 1); err != nil {
		t.Fatal(err)
	}
	go func() { _ = tt.Run(ctx) }()
	waitFor(t, "the world to connect", func() bool { return hub.Online(clientID) })
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := hub.Call(ctx, clientID, "entity", json.RawMessage(`{"uuid":"Actor.x"}`))
			errs <- err
		}()
	}
	for range 3 {
		<-arrived
	}
	tt.Drop()
	for range 3 {
		select {
		case err := <-errs:
			var werr *world.Error
			if !errors.As(err, &werr) || werr.Kind != world.ErrUnavailable {
				t.Fatalf("request in flight at the drop: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a request in flight still waits after the drop (reply time-out is a minute)")
		}
	}
	waitFor(t, "the world to reconnect", func() bool { return tt.Authentications() == 2 && hub.Online(clientID) })
	waitCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := tt.WaitFor(waitCtx, func(tt *linktest.Tabletop) bool {
		n := 0
		for _, m := range tt.Received() {
			if strings.Contains(string(m), `"channel":"hooks"`) {
				n++
			}
		}
		return n == 2
	}); err != nil {
		t.Fatal("the reconnected world did not get its channel again")
	}
}

// waitFor polls cond for up to a minute: what the tests wait for takes
// milliseconds on a quiet machine, and seconds with the race detector on a
// machine busy on every core (a flood of 95 MB of events through a linked
// world took over 10 s there).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLinkTakeOverNeedsTheWorldsCode tries to take a linked world over with
// codes made for new worlds, over REST and over gRPC, presenting the
// world's clientId and server fingerprint (which are not secrets): each is
// refused with 403 naming 'existingClientId', the world keeps its socket
// and token, and only a code made for the world, by a key that may manage
// it, pairs it again.
func TestLinkTakeOverNeedsTheWorldsCode(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	ctx := context.Background()
	tt := tr.linkedTabletop()
	clientID, token := tt.Credentials()

	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	admin := metadata.AppendToOutgoingContext(ctx, "x-api-key", tr.AdminKey)
	svc := relayv1.NewLinkServiceClient(conn)
	grpcCode, err := svc.CreatePairingCode(admin, &relayv1.CreatePairingCodeRequest{})
	if err != nil {
		t.Fatal(err)
	}
	restCode := tr.pairingCode(tr.AdminKey, "").Data(t)["code"].(string)
	for door, code := range map[string]string{"REST": restCode, "gRPC": grpcCode.GetCode()} {
		intruder := tr.tabletop()
		intruder.SetCredentials(clientID, "")
		var he *linktest.HTTPError
		if _, err := intruder.Pair(ctx, code); !errors.As(err, &he) || he.Status != http.StatusForbidden ||
			!strings.Contains(he.Msg, "'existingClientId'") {
			t.Errorf("%s code for a new world presented for %s: %v, want 403 naming 'existingClientId'", door, clientID, err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if !tt.Connected() {
		t.Fatal("a refused pairing closed the world's socket")
	}
	if id, _, err := tr.Links().Pairings().Authenticate(ctx, token); err != nil || id != clientID {
		t.Fatalf("the world's token after refused pairings: %q %v", id, err)
	}

	// A key bound to another world may not make a code for this one.
	elsewhere, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "elsewhere", Scopes: []string{"admin"}, ClientIds: []string{"demo"}})
	if r := tr.pairingCode(elsewhere, clientID); r.Status != http.StatusForbidden {
		t.Fatalf("a code for %s from a key bound to another world: %d %s", clientID, r.Status, r.Body)
	}
	// A key bound to this world makes one, and it pairs the world again.
	own, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "own", Scopes: []string{"admin"}, ClientIds: []string{clientID}})
	r := tr.pairingCode(own, clientID)
	if r.Status != http.StatusOK {
		t.Fatalf("a code from a key bound to the world: %d %s", r.Status, r.Body)
	}
	honest := tr.tabletop()
	honest.SetCredentials(clientID, "")
	if res, err := honest.Pair(ctx, r.Data(t)["code"].(string)); err != nil || res.ClientID != clientID {
		t.Fatalf("the world's own code: %+v %v", res, err)
	}
}

// TestGuessingLimitsGroupIPv6By64: failed authentications (API keys and
// the module's endpoints) and pairing attempts count the addresses of one
// IPv6 /64 together, as the connection caps do, so that a host cannot take
// a fresh allowance with each of its addresses; another /64 keeps its own.
func TestGuessingLimitsGroupIPv6By64(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.PairRateLimit = 2; c.AuthFailureLimit = 2 })
	ctx := context.Background()
	sameHost := func(i int) string { return fmt.Sprintf("[2001:db8:1:2::%x]:4000", i+1) }
	const otherHost = "[2001:db8:1:3::1]:4000"

	// Failed API keys, each from another address of the same /64.
	admit := func(addr string) codes.Code {
		return status.Code(tr.GRPC().Admit(ctx, "/relay.v1.DocumentService/GetDocument", server.Credentials{APIKey: "rk_notakey"}, addr))
	}
	for i := range 2 {
		if got := admit(sameHost(i)); got != codes.Unauthenticated {
			t.Fatalf("failed key %d: %v, want Unauthenticated", i+1, got)
		}
	}
	if got := admit(sameHost(2)); got != codes.ResourceExhausted {
		t.Fatalf("a third failed key from the same /64: %v, want ResourceExhausted", got)
	}
	if got := admit(otherHost); got != codes.Unauthenticated {
		t.Fatalf("a failed key from another /64: %v, want Unauthenticated", got)
	}

	// The module's endpoints, called from addresses of one /64 too.
	handler := tr.Links().Handler()
	call := func(method, path, addr, body string) int {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code
	}
	pairHost := func(i int) string { return fmt.Sprintf("[2001:db8:9:9::%x]:4000", i+1) }
	badPair := `{"code":"ZZZZZZ","worldId":"w","serverFingerprint":"f"}`
	for i := range 2 {
		if got := call(http.MethodPost, link.PathPair, pairHost(i), badPair); got != http.StatusUnauthorized {
			t.Fatalf("pairing attempt %d: %d, want 401", i+1, got)
		}
	}
	if got := call(http.MethodPost, link.PathPair, pairHost(7), badPair); got != http.StatusTooManyRequests {
		t.Fatalf("a third pairing attempt from the same /64: %d, want 429", got)
	}
	probeHost := func(i int) string { return fmt.Sprintf("[2001:db8:7:7::%x]:4000", i+1) }
	for i := range 2 {
		if got := call(http.MethodGet, "/api/clients/fvtt_0000000000000000/active", probeHost(i), ""); got != http.StatusNotFound {
			t.Fatalf("probe %d of an unknown world: %d, want 404", i+1, got)
		}
	}
	if got := call(http.MethodGet, "/api/clients/fvtt_0000000000000000/active", probeHost(5), ""); got != http.StatusTooManyRequests {
		t.Fatalf("a third probe from the same /64: %d, want 429", got)
	}
}

// TestPairRefusesOtherWebPages: a pairing request sent by a web page other
// than the tabletop's own (its Origin is not the serverOrigin it claims,
// or is "null") is refused with 403 before its code is looked at, and the
// code still works for the module on the tabletop's page.
func TestPairRefusesOtherWebPages(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	ctx := context.Background()
	code := tr.pairingCode(tr.AdminKey, "").Data(t)["code"].(string)
	body := fmt.Sprintf(`{"code":%q,"worldId":"w","serverFingerprint":"f","serverOrigin":"https://table.example.org"}`, code)
	for _, origin := range []string{"https://evil.example.com", "null", "https://table.example.org.evil.example.com", "http://table.example.org"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tr.Base+link.PathPair, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(e.Error, "'serverOrigin'") {
			t.Errorf("pairing from %s: %d %q, want 403 naming 'serverOrigin'", origin, resp.StatusCode, e.Error)
		}
	}
	// The module on the tabletop's page (its Origin, any case and the
	// default port aside, is its serverOrigin) pairs with the same code.
	tt := tr.tabletop(func(c *linktest.Config) { c.Origin = "https://table.example.org" })
	if _, err := tt.Pair(ctx, code); err != nil {
		t.Fatalf("the tabletop's own page: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, tr.Base+link.PathPair,
		strings.NewReader(strings.Replace(body, code, tr.pairingCode(tr.AdminKey, "").Data(t)["code"].(string), 1)))
	req.Header.Set("Origin", "HTTPS://Table.Example.org:443")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the same origin spelled otherwise: %d", resp.StatusCode)
	}
}

// TestPairFailureCeiling: failed pairing attempts from many addresses
// (each within its own per-address allowance) meet the relay-wide
// ceiling, after which every attempt, with a good code too, gets 429.
func TestPairFailureCeiling(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.PairRateLimit = 2; c.PairFailureLimit = 5 })
	handler := tr.Links().Handler()
	pair := func(addr, code string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, link.PathPair, strings.NewReader(fmt.Sprintf(`{"code":%q,"worldId":"w","serverFingerprint":"f"}`, code)))
		req.RemoteAddr = addr
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	for i := range 5 {
		if got, body := pair(fmt.Sprintf("198.51.100.%d:4000", i+1), "ZZZZZZ"); got != http.StatusUnauthorized {
			t.Fatalf("failed attempt %d: %d %s", i+1, got, body)
		}
	}
	good := tr.pairingCode(tr.AdminKey, "").Data(t)["code"].(string)
	got, body := pair("203.0.113.9:4000", good)
	if got != http.StatusTooManyRequests || !strings.Contains(body, "on this relay") {
		t.Fatalf("a good code from a fresh address past the ceiling: %d %s, want 429", got, body)
	}
}
