package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tabletop-relay/relay/contract"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// createAccount makes an account through REST with the operator's key and
// returns its id and first key.
func createAccount(t *testing.T, tr *testRelay, name string) (id, key string) {
	t.Helper()
	r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": name})
	if r.Status != http.StatusOK {
		t.Fatalf("create account %q: %d %s", name, r.Status, r.Body)
	}
	d := r.Data(t)
	acct, _ := d["account"].(map[string]any)
	id, _ = acct["id"].(string)
	key, _ = d["key"].(string)
	if id == "" || !strings.HasPrefix(key, "rk_") {
		t.Fatalf("create account answered %s", r.Body)
	}
	return id, key
}

// TestAccountsManagement runs the account service through REST and gRPC:
// only the operator manages accounts, bad input is refused naming the
// parameter with nothing made, an account's keys see only their own
// account's keys, and suspension and deletion refuse its keys at once.
func TestAccountsManagement(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	svc := relayv1.NewAccountServiceClient(tr.Conn)
	grpcAs := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	}

	id, gmKey := createAccount(t, tr, "Guild")

	// Bad input: the parameter named, the right status, nothing made.
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"name":""}`, http.StatusBadRequest, "'name'"},
		{`{"name":"   "}`, http.StatusBadRequest, "'name'"},
		{`{"name":"` + strings.Repeat("n", 65) + `"}`, http.StatusBadRequest, "'name'"},
		{`{"name":"guild"}`, http.StatusConflict, "taken"},
		{`{"name":"Operator"}`, http.StatusConflict, "taken"},
		{`{"name":"x","quotas":{"keys":"many"}}`, http.StatusBadRequest, "keys"},
		{`{"name":"x","quotas":{"worlds":-1}}`, http.StatusBadRequest, "'quotas.worlds'"},
	} {
		r := tr.Do(http.MethodPost, "/accounts", admin, nil, tc.body)
		if r.Status != tc.status || !strings.Contains(r.ErrorText(t), tc.want) {
			t.Errorf("POST /accounts %s = %d %s, want %d naming %s", tc.body, r.Status, r.Body, tc.status, tc.want)
		}
	}
	list := tr.Do(http.MethodGet, "/accounts", admin, nil, nil)
	if accts, _ := list.Data(t)["accounts"].([]any); list.Status != http.StatusOK || len(accts) != 2 {
		t.Fatalf("GET /accounts after bad input = %d %s, want the operator's and Guild", list.Status, list.Body)
	}

	// Only the operator manages accounts: not the account's own admin key,
	// not an operator key without the scope; an operator key with it may.
	plain, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "ops", Scopes: []string{"admin"}})
	withScope, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "accounts", Scopes: []string{"accounts"}})
	for _, key := range []string{gmKey, plain} {
		if r := tr.Do(http.MethodGet, "/accounts", key, nil, nil); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "accounts") {
			t.Errorf("GET /accounts with a non-operator key = %d %s", r.Status, r.Body)
		}
		if _, err := svc.CreateAccount(grpcAs(key), &relayv1.CreateAccountRequest{Name: "sneaky"}); status.Code(err) != codes.PermissionDenied {
			t.Errorf("gRPC CreateAccount with a non-operator key: %v", err)
		}
	}
	if _, err := svc.ListAccounts(grpcAs(withScope), &relayv1.ListAccountsRequest{}); err != nil {
		t.Errorf("gRPC ListAccounts with an operator key holding 'accounts': %v", err)
	}

	// The account's key sees only its own account's keys, makes keys in
	// its account, and is told the operator's key does not exist.
	r := tr.Do(http.MethodPost, "/keys", gmKey, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}})
	if r.Status != http.StatusOK {
		t.Fatalf("account key creates a key: %d %s", r.Status, r.Body)
	}
	r = tr.Do(http.MethodGet, "/keys", gmKey, nil, nil)
	if ks, _ := r.Data(t)["keys"].([]any); len(ks) != 2 {
		t.Fatalf("account key lists %s, want its own two keys", r.Body)
	}
	opKeys := tr.Do(http.MethodGet, "/keys", admin, nil, nil).Data(t)["keys"].([]any)
	adminID := opKeys[0].(map[string]any)["id"].(string)
	const unknownID = "00000000000000ff"
	got := tr.Do(http.MethodDelete, "/keys/"+adminID, gmKey, nil, nil)
	unknown := tr.Do(http.MethodDelete, "/keys/"+unknownID, gmKey, nil, nil)
	if got.Status != unknown.Status || strings.ReplaceAll(got.ErrorText(t), adminID, unknownID) != unknown.ErrorText(t) {
		t.Errorf("revoking the operator's key = %d %q; an unknown key = %d %q", got.Status, got.ErrorText(t), unknown.Status, unknown.ErrorText(t))
	}
	if r := tr.Do(http.MethodGet, "/keys", admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the operator's key after the attempt: %d %s", r.Status, r.Body)
	}

	// Details, usage and changes.
	r = tr.Do(http.MethodGet, "/accounts/"+id, admin, nil, nil)
	if usage, _ := r.Data(t)["account"].(map[string]any)["usage"].(map[string]any); r.Status != http.StatusOK || usage["keys"] != float64(2) {
		t.Fatalf("GET /accounts/%s = %d %s, want 2 keys in use", id, r.Status, r.Body)
	}
	r = tr.Do(http.MethodPatch, "/accounts/"+id, admin, nil, map[string]any{"name": "Guild Two", "quotas": map[string]any{"worlds": 3}})
	if a, _ := r.Data(t)["account"].(map[string]any); r.Status != http.StatusOK || a["name"] != "Guild Two" || a["quotas"].(map[string]any)["worlds"] != float64(3) {
		t.Fatalf("PATCH /accounts/%s = %d %s", id, r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/accounts/acc_0000000000000000", admin, nil, nil); r.Status != http.StatusNotFound {
		t.Fatalf("unknown account = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/accounts/operator/suspend", admin, nil, nil); r.Status != http.StatusBadRequest {
		t.Fatalf("suspending the operator = %d %s", r.Status, r.Body)
	}

	// Suspension refuses the account's keys on REST and gRPC, naming it,
	// and only those; resuming lets them in again.
	if r := tr.Do(http.MethodPost, "/accounts/"+id+"/suspend", admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/keys", gmKey, nil, nil); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "suspended") {
		t.Fatalf("suspended account's key on REST = %d %s", r.Status, r.Body)
	}
	_, err := relayv1.NewKeyServiceClient(tr.Conn).ListKeys(grpcAs(gmKey), &relayv1.ListKeysRequest{})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "suspended") {
		t.Fatalf("suspended account's key on gRPC: %v", err)
	}
	if r := tr.Do(http.MethodGet, "/keys", admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the operator during a suspension: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/accounts/"+id+"/resume", admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resume = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/keys", gmKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resumed account's key = %d %s", r.Status, r.Body)
	}

	// Deletion removes its keys.
	if r := tr.Do(http.MethodDelete, "/accounts/"+id, admin, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("delete = %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/keys", gmKey, relaytest.Q(), nil); r.Status != http.StatusUnauthorized {
		t.Fatalf("deleted account's key = %d %s", r.Status, r.Body)
	}
}

// TestAccountsSeeNoOtherWorld checks that the keys of an account reach no
// world it does not own: the demo world, the operator's, is answered to
// them exactly as a world that does not exist, on REST, gRPC, event
// streams, pairing and unpairing, and is missing from their /clients. A
// stream ticket of a suspended account is refused naming the suspension.
func TestAccountsSeeNoOtherWorld(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	id, gmKey := createAccount(t, tr, "Guild")
	const unknown = "nosuchworld"
	same := func(what string, got, want relaytest.Response) {
		t.Helper()
		if got.Status != want.Status || strings.ReplaceAll(got.ErrorText(t), "demo", unknown) != want.ErrorText(t) {
			t.Errorf("%s: the demo world = %d %q; an unknown world = %d %q", what, got.Status, got.ErrorText(t), want.Status, want.ErrorText(t))
		}
	}
	for _, c := range []struct{ method, path, query string }{
		{"GET", "/get", "uuid=" + relaytest.AriaUUID},
		{"GET", "/search", "query=a"},
		{"GET", "/structure", ""},
		{"GET", "/file-system", ""},
		{"GET", "/encounters", ""},
		{"GET", "/actor/subscribe", "actorUuid=" + relaytest.AriaUUID},
		{"GET", "/hooks/subscribe", ""},
	} {
		q := func(world string) string { return strings.TrimPrefix(c.query+"&clientId="+world, "&") }
		got := tr.Do(c.method, c.path+"?"+q("demo"), gmKey, nil, nil)
		want := tr.Do(c.method, c.path+"?"+q(unknown), gmKey, nil, nil)
		if got.Status != http.StatusNotFound {
			t.Errorf("%s %s on the demo world with another account's key: %d %s", c.method, c.path, got.Status, got.Body)
		}
		same(c.method+" "+c.path, got, want)
	}
	// Without a clientId there is no world of its own to pick.
	if r := tr.Do("GET", "/get?uuid="+relaytest.AriaUUID, gmKey, nil, nil); r.Status != http.StatusBadRequest {
		t.Errorf("GET /get without clientId: %d %s", r.Status, r.Body)
	}
	if r := tr.Do("GET", "/clients", gmKey, nil, nil); r.Status != http.StatusOK || strings.Contains(string(r.Body), "demo") {
		t.Errorf("GET /clients with another account's key: %d %s", r.Status, r.Body)
	}
	same("POST /pairing-codes", tr.Do("POST", "/pairing-codes", gmKey, nil, map[string]any{"clientId": "demo"}),
		tr.Do("POST", "/pairing-codes", tr.AdminKey, nil, map[string]any{"clientId": unknown}))
	same("DELETE /linked-worlds", tr.Do("DELETE", "/linked-worlds/demo", gmKey, nil, nil),
		tr.Do("DELETE", "/linked-worlds/"+unknown, tr.AdminKey, nil, nil))
	// gRPC answers the same.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", gmKey)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)
	_, errDemo := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "demo", Uuid: relaytest.AriaUUID})
	_, errUnknown := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: unknown, Uuid: relaytest.AriaUUID})
	if status.Code(errDemo) != codes.NotFound || strings.ReplaceAll(status.Convert(errDemo).Message(), "demo", unknown) != status.Convert(errUnknown).Message() {
		t.Errorf("gRPC GetDocument: demo %v; unknown %v", errDemo, errUnknown)
	}
	// The demo world is untouched and the operator still reaches it.
	if r := tr.Do("GET", "/get?clientId=demo&uuid="+relaytest.AriaUUID, tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("the operator on the demo world: %d %s", r.Status, r.Body)
	}

	// A ticket issued before the suspension is refused after it.
	r := tr.Do("POST", "/stream-tickets", gmKey, nil, map[string]any{})
	if r.Status != http.StatusOK {
		t.Fatalf("ticket: %d %s", r.Status, r.Body)
	}
	ticket := r.Data(t)["ticket"].(string)
	if r := tr.Do("POST", "/accounts/"+id+"/suspend", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.Status, r.Body)
	}
	r = tr.Do("GET", "/hooks/subscribe?clientId=demo&ticket="+ticket, "", nil, nil)
	if r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "suspended") {
		t.Errorf("a suspended account's ticket: %d %s", r.Status, r.Body)
	}
}

// TestAccountsLinkTheirWorlds pairs a tabletop with a code made by an
// account's admin key: the world belongs to that account, whose keys
// reach it as the operator's do, while another account's keys are
// answered as for a world that does not exist, and may neither pair it
// again nor unpair it.
func TestAccountsLinkTheirWorlds(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	_, keyA := createAccount(t, tr, "Alpha")
	_, keyB := createAccount(t, tr, "Beta")

	r := tr.pairingCode(keyA, "")
	if r.Status != http.StatusOK {
		t.Fatalf("pairing code of account A: %d %s", r.Status, r.Body)
	}
	tt := tr.tabletop()
	res, err := tt.Pair(context.Background(), r.Data(t)["code"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	cid := res.ClientID

	// Account A lists it as its only world and reaches it without naming
	// it, as the operator does by name.
	r = tr.Do("GET", "/clients", keyA, nil, nil)
	if cs, _ := r.Data(t)["clients"].([]any); len(cs) != 1 || cs[0].(map[string]any)["clientId"] != cid {
		t.Fatalf("account A's /clients: %s", r.Body)
	}
	byOperator := tr.Do("GET", "/structure?clientId="+cid, tr.AdminKey, nil, nil)
	byA := tr.Do("GET", "/structure", keyA, nil, nil)
	if byA.Status != byOperator.Status || byA.Status == http.StatusNotFound {
		t.Fatalf("account A on its world: %d %s; the operator: %d %s", byA.Status, byA.Body, byOperator.Status, byOperator.Body)
	}
	// Account B: not listed, unknown everywhere.
	if r := tr.Do("GET", "/clients", keyB, nil, nil); strings.Contains(string(r.Body), cid) {
		t.Fatalf("account B's /clients: %s", r.Body)
	}
	const unknown = "nosuchworld"
	check := func(what string, got, want relaytest.Response) {
		t.Helper()
		if got.Status != want.Status || strings.ReplaceAll(got.ErrorText(t), cid, unknown) != want.ErrorText(t) {
			t.Errorf("%s: account A's world = %d %q; an unknown world = %d %q", what, got.Status, got.ErrorText(t), want.Status, want.ErrorText(t))
		}
	}
	check("GET /structure", tr.Do("GET", "/structure?clientId="+cid, keyB, nil, nil), tr.Do("GET", "/structure?clientId="+unknown, keyB, nil, nil))
	check("POST /pairing-codes", tr.pairingCode(keyB, cid), tr.pairingCode(keyB, unknown))
	check("DELETE /linked-worlds", tr.Do("DELETE", "/linked-worlds/"+cid, keyB, nil, nil), tr.Do("DELETE", "/linked-worlds/"+unknown, keyB, nil, nil))
	if !tt.Connected() {
		t.Fatal("account B's attempts disconnected account A's world")
	}
	// Account A may pair it again.
	if r := tr.pairingCode(keyA, cid); r.Status != http.StatusOK {
		t.Fatalf("account A pairs its world again: %d %s", r.Status, r.Body)
	}

	// Suspending account A ends its open event streams, SSE and gRPC,
	// within a second.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", tr.Base+"/hooks/subscribe?clientId="+cid, nil)
	req.Header.Set("x-api-key", keyA)
	sse := relaytest.ReadSSE(t, req)
	if ev := <-sse; ev.Name != "connected" {
		t.Fatalf("first SSE event %+v", ev)
	}
	grpcStream, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeHooks(
		metadata.AppendToOutgoingContext(t.Context(), "x-api-key", keyA), &relayv1.SubscribeHooksRequest{ClientId: cid})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := grpcStream.Recv(); err != nil {
		t.Fatalf("first gRPC event: %v", err)
	}
	id := tr.Do("GET", "/accounts", tr.AdminKey, nil, nil).Data(t)["accounts"].([]any)[1].(map[string]any)["id"].(string)
	if r := tr.Do("POST", "/accounts/"+id+"/suspend", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.Status, r.Body)
	}
	suspendedAt := time.Now()
	for open := true; open; {
		select {
		case _, open = <-sse:
		case <-time.After(2 * time.Second):
			t.Fatal("the SSE stream is still open after the suspension")
		}
	}
	grpcErr := make(chan error, 1)
	go func() {
		for {
			if _, err := grpcStream.Recv(); err != nil {
				grpcErr <- err
				return
			}
		}
	}()
	select {
	case err := <-grpcErr:
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(status.Convert(err).Message(), "suspended") {
			t.Errorf("the gRPC stream ended with %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the gRPC stream is still open after the suspension")
	}
	// Its linked world's socket is closed too, with the code after which
	// the module keeps its token and tries again later; it is refused
	// until the account is resumed.
	waitFor(t, "the linked world's socket to close", func() bool { return !tt.Connected() })
	// One second of the rule, and some slack for a loaded machine.
	if d := time.Since(suspendedAt); d > 1500*time.Millisecond {
		t.Errorf("the streams and the socket ended %v after the suspension", d)
	}
	if tt.LastClose() != link.CloseShutdown {
		t.Errorf("the socket closed with %d, want %d", tt.LastClose(), link.CloseShutdown)
	}
	var ce *linktest.CloseError
	if err := tt.Connect(context.Background()); !errors.As(err, &ce) || ce.Code != link.CloseShutdown {
		t.Fatalf("reconnecting while suspended: %v", err)
	}
	if r := tr.Do("POST", "/accounts/"+id+"/resume", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resume: %d %s", r.Status, r.Body)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatalf("reconnecting after the resumption: %v", err)
	}

	// Deleting account A unpairs its linked world: its token is revoked
	// and its socket closed.
	if r := tr.Do("DELETE", "/accounts/"+id, tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	waitFor(t, "the deleted account's world to be disconnected", func() bool { return !tt.Connected() })
	if tt.LastClose() != link.CloseAuthFailed {
		t.Errorf("the deleted account's world closed with %d, want %d", tt.LastClose(), link.CloseAuthFailed)
	}
	if r := tr.Do("GET", "/clients", tr.AdminKey, nil, nil); strings.Contains(string(r.Body), cid) {
		t.Errorf("the deleted account's world is still listed: %s", r.Body)
	}
}

// TestAccountKeyQuota caps an account's keys: by its own quota, else by
// --account-max-keys; past it a new key is refused naming the quota and
// nothing is made. The operator's account is not capped by the default.
func TestAccountKeyQuota(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.AccountMaxKeys = 2 })
	newKey := func(key string) relaytest.Response {
		return tr.Do("POST", "/keys", key, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}})
	}
	count := func(key string) int {
		ks, _ := tr.Do("GET", "/keys", key, nil, nil).Data(t)["keys"].([]any)
		return len(ks)
	}
	_, byDefault := createAccount(t, tr, "Default")
	if r := newKey(byDefault); r.Status != http.StatusOK {
		t.Fatalf("second key within the default: %d %s", r.Status, r.Body)
	}
	if r := newKey(byDefault); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'keys'") {
		t.Fatalf("third key past the default: %d %s", r.Status, r.Body)
	}
	if n := count(byDefault); n != 2 {
		t.Fatalf("the account holds %d keys after the refusal, want 2", n)
	}
	// The account's own quota wins over the default.
	r := tr.Do("POST", "/accounts", tr.AdminKey, nil, map[string]any{"name": "Big", "quotas": map[string]any{"keys": 3}})
	big := r.Data(t)["key"].(string)
	for i := range 2 {
		if r := newKey(big); r.Status != http.StatusOK {
			t.Fatalf("key %d within the account's quota: %d %s", i+2, r.Status, r.Body)
		}
	}
	if r := newKey(big); r.Status != http.StatusForbidden {
		t.Fatalf("fourth key past the account's quota: %d %s", r.Status, r.Body)
	}
	// The operator makes keys past the default.
	for i := range 3 {
		if r := newKey(tr.AdminKey); r.Status != http.StatusOK {
			t.Fatalf("operator key %d: %d %s", i, r.Status, r.Body)
		}
	}
}

// TestKeysPerCreatorCap bounds the unrevoked keys one key may have
// created (--max-keys-per-creator), the operator's bootstrap key too:
// past it a new key is refused naming the limit and nothing is made;
// revoking one makes room again; another key of the same account has its
// own allowance; the same holds over gRPC.
func TestKeysPerCreatorCap(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxKeysPerCreator = 2 })
	newKey := func(key string, scopes ...string) relaytest.Response {
		if len(scopes) == 0 {
			scopes = []string{"entity:read"}
		}
		return tr.Do("POST", "/keys", key, nil, map[string]any{"name": "bot", "scopes": scopes})
	}
	count := func() int {
		ks, _ := tr.Do("GET", "/keys", tr.AdminKey, nil, nil).Data(t)["keys"].([]any)
		return len(ks)
	}
	first := newKey(tr.AdminKey, "admin", "entity:read")
	if first.Status != http.StatusOK {
		t.Fatalf("first key: %d %s", first.Status, first.Body)
	}
	if r := newKey(tr.AdminKey); r.Status != http.StatusOK {
		t.Fatalf("second key: %d %s", r.Status, r.Body)
	}
	before := count()
	refused := newKey(tr.AdminKey)
	if refused.Status != http.StatusForbidden || !strings.Contains(refused.ErrorText(t), "--max-keys-per-creator") {
		t.Fatalf("third key by the same key: %d %s; want 403 naming the limit", refused.Status, refused.Body)
	}
	if n := count(); n != before {
		t.Fatalf("the refused creation made a key: %d keys, want %d", n, before)
	}
	// Over gRPC the same refusal.
	_, err := relayv1.NewKeyServiceClient(tr.Conn).CreateKey(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey), &relayv1.CreateKeyRequest{Name: "bot", Scopes: []string{"entity:read"}})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "--max-keys-per-creator") {
		t.Fatalf("third key over gRPC: %v", err)
	}
	// Another key of the operator's account has an allowance of its own.
	child := first.Data(t)["key"].(string)
	if r := newKey(child); r.Status != http.StatusOK {
		t.Fatalf("a key made by the first key: %d %s", r.Status, r.Body)
	}
	// Revoking one of the bootstrap key's keys makes room again.
	id := first.Data(t)["apiKey"].(map[string]any)["id"].(string)
	if r := tr.Do("DELETE", "/keys/"+id, tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.Status, r.Body)
	}
	if r := newKey(tr.AdminKey); r.Status != http.StatusOK {
		t.Fatalf("a key after a revocation: %d %s", r.Status, r.Body)
	}
}

// TestAccountApprovesPairRequest: a pair request approved with an
// account's admin key links the world into that account, which lists
// it, while another account does not see it.
func TestAccountApprovesPairRequest(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	_, keyA := createAccount(t, tr, "Alpha")
	_, keyB := createAccount(t, tr, "Beta")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tt := linktest.New(linktest.Config{RelayURL: tr.Base, WorldID: "w-acct", WorldTitle: "Account World", SystemID: "dnd5e",
		FoundryVersion: "13.345", ServerFingerprint: "fp-acct", ReconnectMaxAttempts: 1})
	res, err := tt.PairByRequest(ctx, 50*time.Millisecond, func(p linktest.PairRequest) {
		go func() {
			if a := tr.Do("POST", "/auth/pair-request/"+p.Code+"/approve", keyA, nil, nil); a.Status != http.StatusOK {
				t.Errorf("approve with account A's key: %d %s", a.Status, a.Body)
			}
		}()
	})
	if err != nil {
		t.Fatalf("pair by request: %v", err)
	}
	if r := tr.Do("GET", "/clients", keyA, nil, nil); !strings.Contains(string(r.Body), res.ClientID) {
		t.Fatalf("account A's /clients lacks its world %s: %s", res.ClientID, r.Body)
	}
	if r := tr.Do("GET", "/clients", keyB, nil, nil); strings.Contains(string(r.Body), res.ClientID) {
		t.Fatalf("account B's /clients shows account A's world: %s", r.Body)
	}
}

// TestAccountsClassEveryRoute runs every REST route of the contract with
// account A's admin key against account B's linked world, key and
// account, and compares each answer with the answer for an unknown id of
// the same kind: same status, same text with the id replaced. B's world
// stays connected and B's keys unchanged. Then every route with a
// suspended account's key is refused with 403 naming the suspension.
func TestAccountsClassEveryRoute(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	idA, keyA := createAccount(t, tr, "Alpha")
	idB, keyB := createAccount(t, tr, "Beta")
	r := tr.pairingCode(keyB, "")
	tt := tr.tabletop()
	res, err := tt.Pair(context.Background(), r.Data(t)["code"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	worldB := res.ClientID
	keysB := tr.Do("GET", "/keys", keyB, nil, nil).Data(t)["keys"].([]any)
	keyIDB := keysB[0].(map[string]any)["id"].(string)
	const unknownWorld, unknownKey, unknownAcct = "nosuchworld", "00000000000000ff", "acc_00000000000000ff"

	send := func(rt routeRPC, key, world, keyID, acct string) relaytest.Response {
		path := strings.NewReplacer("{id}", keyID, "{client_id}", world).Replace(rt.path)
		if strings.HasPrefix(rt.path, "/accounts/") {
			path = strings.Replace(rt.path, "{id}", acct, 1)
		}
		switch rt.method {
		case "GET", "DELETE":
			return tr.Do(rt.method, path, key, relaytest.Q("clientId", world), nil)
		}
		return tr.Do(rt.method, path, key, nil, map[string]any{"clientId": world})
	}
	for _, rt := range specRoutes {
		got := send(rt, keyA, worldB, keyIDB, idB)
		want := send(rt, keyA, unknownWorld, unknownKey, unknownAcct)
		text := strings.NewReplacer(worldB, unknownWorld, keyIDB, unknownKey, idB, unknownAcct).Replace(got.ErrorText(t))
		if got.Status != want.Status || text != want.ErrorText(t) {
			t.Errorf("%s %s: B's = %d %q; unknown = %d %q", rt.method, rt.path, got.Status, got.ErrorText(t), want.Status, want.ErrorText(t))
		}
	}
	if !tt.Connected() {
		t.Fatal("account B's world was disconnected by account A's calls")
	}
	if after := tr.Do("GET", "/keys", keyB, nil, nil).Data(t)["keys"].([]any); len(after) != len(keysB) || after[0].(map[string]any)["revokedAt"] != "" {
		t.Fatalf("account B's keys changed: %v", after)
	}

	// A suspended account's key is refused on every route, naming it.
	if r := tr.Do("POST", "/accounts/"+idA+"/suspend", tr.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend: %d %s", r.Status, r.Body)
	}
	for _, rt := range specRoutes {
		got := send(rt, keyA, worldB, keyIDB, idB)
		if got.Status != http.StatusForbidden || !strings.Contains(got.ErrorText(t), "suspended") {
			t.Errorf("%s %s with a suspended account's key: %d %s", rt.method, rt.path, got.Status, got.Body)
		}
	}
}

// TestAccountsClassEveryRPC calls every gRPC method of the contract with
// account A's admin key naming account B's linked world, key and account,
// and compares each answer with the answer for unknown ids: the same code
// and the same message with the id replaced.
func TestAccountsClassEveryRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	_, keyA := createAccount(t, tr, "Alpha")
	idB, keyB := createAccount(t, tr, "Beta")
	r := tr.pairingCode(keyB, "")
	tt := tr.tabletop()
	res, err := tt.Pair(context.Background(), r.Data(t)["code"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	worldB := res.ClientID
	keyIDB := tr.Do("GET", "/keys", keyB, nil, nil).Data(t)["keys"].([]any)[0].(map[string]any)["id"].(string)
	const unknownWorld, unknownKey, unknownAcct = "nosuchworld", "00000000000000ff", "acc_00000000000000ff"

	services, err := contract.Descriptors()
	if err != nil {
		t.Fatal(err)
	}
	call := func(md protoreflect.MethodDescriptor, world, keyID, acct string) error {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
		if err != nil {
			t.Fatal(err)
		}
		req := mt.New()
		fields := req.Descriptor().Fields()
		if f := fields.ByName("client_id"); f != nil {
			req.Set(f, protoreflect.ValueOfString(world))
		}
		if f := fields.ByName("id"); f != nil {
			id := keyID
			if md.Parent().Name() == "AccountService" {
				id = acct
			}
			req.Set(f, protoreflect.ValueOfString(id))
		}
		ot, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", keyA), 5*time.Second)
		defer cancel()
		method := contract.FullMethodName(md)
		if !md.IsStreamingClient() && !md.IsStreamingServer() {
			return tr.Conn.Invoke(ctx, method, req.Interface(), ot.New().Interface())
		}
		s, err := tr.Conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, method)
		if err != nil {
			return err
		}
		if err := s.SendMsg(req.Interface()); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		_ = s.CloseSend()
		return s.RecvMsg(ot.New().Interface())
	}
	n := 0
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			n++
			got := status.Convert(call(md, worldB, keyIDB, idB))
			want := status.Convert(call(md, unknownWorld, unknownKey, unknownAcct))
			text := strings.NewReplacer(worldB, unknownWorld, keyIDB, unknownKey, idB, unknownAcct).Replace(got.Message())
			if got.Code() != want.Code() || text != want.Message() {
				t.Errorf("%s: B's = %s %q; unknown = %s %q", md.FullName(), got.Code(), got.Message(), want.Code(), want.Message())
			}
		}
	}
	if n < 60 || !tt.Connected() {
		t.Fatalf("%d methods called; B's world connected: %v", n, tt.Connected())
	}
}

// TestAccountKeysBoundToOwnWorlds: an account's key may be bound only to
// its account's worlds; another account's world and an unknown one get
// the same refusal, and nothing is made.
func TestAccountKeysBoundToOwnWorlds(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	_, keyA := createAccount(t, tr, "Alpha")
	bind := func(world string) relaytest.Response {
		return tr.Do("POST", "/keys", keyA, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}, "clientIds": []string{world}})
	}
	got, want := bind("demo"), bind("nosuchworld")
	if got.Status != http.StatusForbidden || strings.ReplaceAll(got.ErrorText(t), "demo", "nosuchworld") != want.ErrorText(t) || want.Status != got.Status {
		t.Fatalf("binding to the operator's world: %d %s; to an unknown world: %d %s", got.Status, got.Body, want.Status, want.Body)
	}
	if ks := tr.Do("GET", "/keys", keyA, nil, nil).Data(t)["keys"].([]any); len(ks) != 1 {
		t.Fatalf("account A holds %d keys after the refusals, want 1", len(ks))
	}
	// The operator may still bind keys to any world id, as before.
	if r := tr.Do("POST", "/keys", tr.AdminKey, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}, "clientIds": []string{"nosuchworld"}}); r.Status != http.StatusOK {
		t.Fatalf("the operator binds a key: %d %s", r.Status, r.Body)
	}
}
