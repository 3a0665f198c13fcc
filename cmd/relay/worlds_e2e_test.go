package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// clientIDs lists the worlds GET /clients shows to key.
func (tr *testRelay) clientIDs(key string) []string {
	tr.t.Helper()
	r := tr.Do(http.MethodGet, "/clients", key, nil, nil)
	if r.Status != http.StatusOK {
		tr.t.Fatalf("GET /clients: %d %s", r.Status, r.Body)
	}
	var out []string
	for _, c := range r.Data(tr.t)["clients"].([]any) {
		out = append(out, c.(map[string]any)["clientId"].(string))
	}
	slices.Sort(out)
	return out
}

// TestWorldsCreateAndDelete makes and removes embedded worlds through REST
// and gRPC: a world belongs to the account that made it and to no other,
// bad input is refused naming the parameter with nothing made, and only
// the owning account (or the operator) removes it.
func TestWorldsCreateAndDelete(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	_, keyA := createAccount(t, tr, "Alpha")
	_, keyB := createAccount(t, tr, "Beta")
	before := tr.clientIDs(admin)

	// Bad input: the parameter named, the right status, nothing made.
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"seed":"demo"}`, http.StatusBadRequest, "'title'"},
		{`{"title":"   ","seed":"demo"}`, http.StatusBadRequest, "'title'"},
		{`{"title":"` + strings.Repeat("t", 201) + `","seed":"demo"}`, http.StatusBadRequest, "'title'"},
		{`{"title":"T"}`, http.StatusBadRequest, "'seed'"},
		{`{"title":"T","seed":"full"}`, http.StatusBadRequest, "'seed'"},
		{`{"title":"T","seed":"demo","clientId":"-bad"}`, http.StatusBadRequest, "'clientId'"},
		{`{"title":"T","seed":"demo","clientId":"has space"}`, http.StatusBadRequest, "'clientId'"},
		{`{"title":"T","seed":"demo","clientId":"` + strings.Repeat("x", 65) + `"}`, http.StatusBadRequest, "'clientId'"},
		{`{"title":"T","seed":"demo","clientId":"demo"}`, http.StatusConflict, "demo"},
	} {
		r := tr.Do(http.MethodPost, "/worlds", keyA, nil, tc.body)
		if r.Status != tc.status || !strings.Contains(r.ErrorText(t), tc.want) {
			t.Errorf("POST /worlds %s = %d %s, want %d naming %s", tc.body, r.Status, r.Body, tc.status, tc.want)
		}
	}
	if got := tr.clientIDs(admin); !slices.Equal(got, before) {
		t.Fatalf("worlds after bad input: %v, want %v", got, before)
	}

	// Account A makes a demo world over REST: A sees it and reads it, B
	// and the unknown-world answer are the same.
	r := tr.Do(http.MethodPost, "/worlds", keyA, nil, map[string]any{"clientId": "alpha-tavern", "title": "Alpha's Tavern", "seed": "demo"})
	if r.Status != http.StatusOK {
		t.Fatalf("POST /worlds = %d %s", r.Status, r.Body)
	}
	if d := r.Data(t); d["clientId"] != "alpha-tavern" || d["title"] != "Alpha's Tavern" || d["seed"] != "demo" || !strings.HasPrefix(d["accountId"].(string), "acc_") {
		t.Fatalf("POST /worlds answered %s", r.Body)
	}
	if got := tr.clientIDs(keyA); !slices.Equal(got, []string{"alpha-tavern"}) {
		t.Fatalf("account A's worlds: %v", got)
	}
	if got := tr.clientIDs(keyB); len(got) != 0 {
		t.Fatalf("account B sees %v", got)
	}
	if r := tr.Do(http.MethodGet, "/get", keyA, relaytest.Q("clientId", "alpha-tavern", "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("account A reads its demo world: %d %s", r.Status, r.Body)
	}
	// A key of A bound to nothing reaches its only world without naming it.
	if r := tr.Do(http.MethodGet, "/get", keyA, relaytest.Q("uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("account A reads its only world without clientId: %d %s", r.Status, r.Body)
	}
	theirs := tr.Do(http.MethodGet, "/get", keyB, relaytest.Q("clientId", "alpha-tavern", "uuid", relaytest.GoblinUUID), nil)
	unknown := tr.Do(http.MethodGet, "/get", keyB, relaytest.Q("clientId", "nowhere-at-all", "uuid", relaytest.GoblinUUID), nil)
	if theirs.Status != http.StatusNotFound || strings.ReplaceAll(theirs.ErrorText(t), "alpha-tavern", "nowhere-at-all") != unknown.ErrorText(t) {
		t.Fatalf("account B reads A's world: %d %q; an unknown world: %d %q", theirs.Status, theirs.ErrorText(t), unknown.Status, unknown.ErrorText(t))
	}
	// The same id again is taken, whoever asks.
	for _, key := range []string{keyA, keyB, admin} {
		if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": "alpha-tavern", "title": "Again", "seed": "empty"}); r.Status != http.StatusConflict {
			t.Errorf("POST /worlds with a taken id = %d %s, want 409", r.Status, r.Body)
		}
	}

	// Over gRPC, B makes an empty world with an id the relay picks.
	svc := relayv1.NewWorldServiceClient(tr.Conn)
	as := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	}
	made, err := svc.CreateWorld(as(keyB), &relayv1.CreateWorldRequest{Title: "Beta's Keep", Seed: "empty"})
	if err != nil {
		t.Fatalf("gRPC CreateWorld: %v", err)
	}
	bWorld := made.GetClientId()
	if !strings.HasPrefix(bWorld, "w_") || made.GetSystem() != "dnd5e" {
		t.Fatalf("gRPC CreateWorld answered %v", made)
	}
	if r := tr.Do(http.MethodGet, "/get", keyB, relaytest.Q("clientId", bWorld, "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusNotFound || !strings.Contains(r.ErrorText(t), "goblin") {
		t.Fatalf("an empty world holds no goblin: %d %s", r.Status, r.Body)
	}
	if _, err := svc.CreateWorld(as(keyB), &relayv1.CreateWorldRequest{Title: "x", Seed: "nope"}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "'seed'") {
		t.Fatalf("gRPC CreateWorld with a bad seed: %v", err)
	}

	// Keys that may not make worlds: without the admin scope, bound to
	// worlds, acting as a user.
	reader, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}})
	bound, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "bound", Scopes: []string{"admin"}, ClientIds: []string{"demo"}})
	for _, key := range []string{reader, bound} {
		if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"title": "Nope", "seed": "empty"}); r.Status != http.StatusForbidden {
			t.Errorf("POST /worlds with a key that may not = %d %s", r.Status, r.Body)
		}
	}

	// Removal: B cannot remove A's world (answered as unknown), over REST
	// or gRPC; A can; then it is gone.
	theirs = tr.Do(http.MethodDelete, "/worlds/alpha-tavern", keyB, nil, nil)
	unknown = tr.Do(http.MethodDelete, "/worlds/nowhere-at-all", keyB, nil, nil)
	if theirs.Status != http.StatusNotFound || strings.ReplaceAll(theirs.ErrorText(t), "alpha-tavern", "nowhere-at-all") != unknown.ErrorText(t) {
		t.Fatalf("B removes A's world: %d %q; an unknown one: %d %q", theirs.Status, theirs.ErrorText(t), unknown.Status, unknown.ErrorText(t))
	}
	if _, err := svc.DeleteWorld(as(keyB), &relayv1.DeleteWorldRequest{ClientId: "alpha-tavern"}); status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC: B removes A's world: %v", err)
	}
	if _, err := svc.DeleteWorld(as(keyA), &relayv1.DeleteWorldRequest{ClientId: "demo"}); status.Code(err) != codes.NotFound {
		t.Fatalf("gRPC: A removes the operator's world: %v", err)
	}
	if r := tr.Do(http.MethodGet, "/get", keyA, relaytest.Q("clientId", "alpha-tavern", "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("A's world after B's attempt: %d %s", r.Status, r.Body)
	}
	sse := tr.openStream("/hooks/subscribe", keyA, relaytest.Q("clientId", "alpha-tavern"), nil)
	sse.expect("connected")
	if r := tr.Do(http.MethodPut, "/update", keyA, relaytest.Q("clientId", "alpha-tavern"), map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"name": "Alpha's secret goblin"}}); r.Status != http.StatusOK {
		t.Fatalf("A changes its world: %d %s", r.Status, r.Body)
	}
	sse.expect("updateActor")
	if r := tr.Do(http.MethodDelete, "/worlds/alpha-tavern", keyA, nil, nil); r.Status != http.StatusOK || r.Data(t)["clientId"] != "alpha-tavern" {
		t.Fatalf("A removes its world: %d %s", r.Status, r.Body)
	}
	if _, ended := sse.ended(5 * time.Second); !ended {
		t.Fatal("the removed world's event stream stayed open")
	}
	if r := tr.Do(http.MethodGet, "/get", keyA, relaytest.Q("clientId", "alpha-tavern", "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusNotFound {
		t.Fatalf("the removed world answers %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodDelete, "/worlds/alpha-tavern", keyA, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("removing it again = %d %s", r.Status, r.Body)
	}
	// The operator removes any account's world, over gRPC.
	if _, err := svc.DeleteWorld(as(admin), &relayv1.DeleteWorldRequest{ClientId: bWorld}); err != nil {
		t.Fatalf("gRPC: the operator removes B's world: %v", err)
	}
	if got := tr.clientIDs(admin); !slices.Equal(got, before) {
		t.Fatalf("worlds at the end: %v, want %v", got, before)
	}
	// The id is free again, and the new world starts afresh: a resume
	// from the old world's events replays none of them.
	if r := tr.Do(http.MethodPost, "/worlds", keyB, nil, map[string]any{"clientId": "alpha-tavern", "title": "Reborn", "seed": "demo"}); r.Status != http.StatusOK {
		t.Fatalf("making a world under a removed id: %d %s", r.Status, r.Body)
	}
	if got := tr.clientIDs(keyA); len(got) != 0 {
		t.Fatalf("A sees %v after B took the id", got)
	}
	resumed := tr.openStream("/hooks/subscribe", keyB, relaytest.Q("clientId", "alpha-tavern"), http.Header{"Last-Event-Id": {"0"}})
	for _, f := range resumed.expect("connected") {
		if strings.Contains(f.data, "secret") {
			t.Fatalf("the new world's stream carries the removed world's data: %s", f.data)
		}
	}
	resumed.quiet(500 * time.Millisecond)
}

// TestWorldsQuota refuses a world past the account's `worlds` quota, with
// the quota named and nothing made, over REST and gRPC; GET /accounts/{id}
// shows the use against it; deleting the account removes its worlds.
func TestWorldsQuota(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.AccountMaxWorlds = 2 })
	admin := tr.AdminKey
	id, key := createAccount(t, tr, "Quota")
	for _, w := range []string{"quota-one", "quota-two"} {
		if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": w, "title": w, "seed": "empty"}); r.Status != http.StatusOK {
			t.Fatalf("POST /worlds %s: %d %s", w, r.Status, r.Body)
		}
	}
	r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": "quota-three", "title": "three", "seed": "empty"})
	if r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'worlds'") {
		t.Fatalf("a third world with the default quota of 2: %d %s", r.Status, r.Body)
	}
	svc := relayv1.NewWorldServiceClient(tr.Conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	if _, err := svc.CreateWorld(ctx, &relayv1.CreateWorldRequest{ClientId: "quota-three", Title: "three", Seed: "empty"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "'worlds'") {
		t.Fatalf("gRPC: a third world: %v", err)
	}
	if got := tr.clientIDs(key); !slices.Equal(got, []string{"quota-one", "quota-two"}) {
		t.Fatalf("worlds after the refusals: %v", got)
	}
	acct := tr.Do(http.MethodGet, "/accounts/"+id, admin, nil, nil).Data(t)["account"].(map[string]any)
	usage, limits := acct["usage"].(map[string]any), acct["limits"].(map[string]any)
	if usage["worlds"] != float64(2) || limits["worlds"] != float64(2) {
		t.Fatalf("GET /accounts/%s: usage %v limits %v", id, usage, limits)
	}
	if stored, _ := usage["storedBytes"].(string); stored == "" || stored == "0" {
		t.Fatalf("GET /accounts/%s: storedBytes %v, want the worlds' size", id, usage["storedBytes"])
	}
	// A pairing code for a new world counts against the quota too, over
	// REST and gRPC.
	if r := tr.Do(http.MethodPost, "/pairing-codes", key, nil, map[string]any{}); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'worlds'") {
		t.Fatalf("a pairing code past the worlds quota: %d %s", r.Status, r.Body)
	}
	if _, err := relayv1.NewLinkServiceClient(tr.Conn).CreatePairingCode(ctx, &relayv1.CreatePairingCodeRequest{}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "'worlds'") {
		t.Fatalf("gRPC: a pairing code past the worlds quota: %v", err)
	}
	// The account's own quota overrides the default.
	if r := tr.Do(http.MethodPatch, "/accounts/"+id, admin, nil, map[string]any{"quotas": map[string]any{"worlds": 3}}); r.Status != http.StatusOK {
		t.Fatalf("PATCH quotas: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": "quota-three", "title": "three", "seed": "empty"}); r.Status != http.StatusOK {
		t.Fatalf("a third world with a quota of 3: %d %s", r.Status, r.Body)
	}
	// Deleting the account removes its embedded worlds.
	if r := tr.Do(http.MethodDelete, "/accounts/"+id, admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE /accounts/%s: %d %s", id, r.Status, r.Body)
	}
	for _, w := range []string{"quota-one", "quota-two", "quota-three"} {
		if slices.Contains(tr.clientIDs(admin), w) {
			t.Errorf("world %s outlived its account", w)
		}
	}
}
