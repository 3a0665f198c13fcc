package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// auditRecords lists the audit records key sees with the query, through
// REST, and fails the test unless the answer is 200.
func auditRecords(t *testing.T, r *relaytest.Relay, key string, query ...string) ([]map[string]any, string) {
	t.Helper()
	resp := r.Do(http.MethodGet, "/audit", key, relaytest.Q(query...), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("GET /audit %v: %d %s", query, resp.Status, resp.Body)
	}
	d := resp.Data(t)
	var out []map[string]any
	for _, v := range d["records"].([]any) {
		out = append(out, v.(map[string]any))
	}
	next, _ := d["nextCursor"].(string)
	return out, next
}

// findRecord returns the first record of action with outcome, or nil.
func findRecord(records []map[string]any, action, outcome string) map[string]any {
	for _, rec := range records {
		if rec["action"] == action && rec["outcome"] == outcome {
			return rec
		}
	}
	return nil
}

// keyID is the id of the key that a plaintext key is, from its own
// listing.
func keyID(t *testing.T, r *relaytest.Relay, key string) string {
	t.Helper()
	resp := r.Do(http.MethodGet, "/keys", key, nil, nil)
	keys := resp.Data(t)["keys"].([]any)
	if len(keys) == 0 {
		t.Fatalf("the key lists no keys: %s", resp.Body)
	}
	for _, k := range keys {
		if m := k.(map[string]any); strings.HasPrefix(key, "rk_"+m["prefix"].(string)) {
			return m["id"].(string)
		}
	}
	t.Fatalf("the key is not among its own listing: %s", resp.Body)
	return ""
}

// TestAuditRecordsEachActionClass makes one action of each audited class
// (account, key, pairing, key request, pair request), refusals among
// them, and finds each in the audit log with the right account, key,
// address, target and outcome; each account sees its own records only,
// over REST and gRPC, and the operator sees every record.
func TestAuditRecordsEachActionClass(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	r := tr.Relay
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	acctA, keyA := createAccount(t, tr, "Audited A")
	acctB, keyB := createAccount(t, tr, "Audited B")
	idA := keyID(t, r, keyA)

	// Keys: one made, one refused (bound to another account's world), one
	// revoked; one call with a key that does not exist.
	made := r.Do(http.MethodPost, "/keys", keyA, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}})
	if made.Status != http.StatusOK {
		t.Fatalf("create key: %d %s", made.Status, made.Body)
	}
	botID := made.Data(t)["apiKey"].(map[string]any)["id"].(string)
	if resp := r.Do(http.MethodPost, "/keys", keyA, nil, map[string]any{"name": "x", "scopes": []string{"entity:read"}, "clientIds": []string{"demo"}}); resp.Status != http.StatusForbidden {
		t.Fatalf("key bound to another account's world: %d %s", resp.Status, resp.Body)
	}
	if resp := r.Do(http.MethodDelete, "/keys/"+botID, keyA, nil, nil); resp.Status != http.StatusOK {
		t.Fatalf("revoke: %d %s", resp.Status, resp.Body)
	}
	if resp := r.Do(http.MethodGet, "/keys", "rk_"+strings.Repeat("x", 43), nil, nil); resp.Status != http.StatusUnauthorized {
		t.Fatalf("unknown key: %d %s", resp.Status, resp.Body)
	}

	// Pairing: A makes a code, a tabletop trades it.
	code := r.Do(http.MethodPost, "/pairing-codes", keyA, nil, map[string]any{})
	if code.Status != http.StatusOK {
		t.Fatalf("pairing code: %d %s", code.Status, code.Body)
	}
	tt := linktest.New(linktest.Config{RelayURL: r.Base, WorldID: "w-audit", WorldTitle: "Audited World", ServerFingerprint: "fp-audit", ReconnectMaxAttempts: 1})
	paired, err := tt.Pair(ctx, code.Data(t)["code"].(string))
	if err != nil {
		t.Fatalf("pair: %v", err)
	}

	// A key request approved by A and fetched by its asker; a pair
	// request denied by A.
	kr := openKeyRequest(t, r, map[string]any{"appName": "Audit bot", "scopes": []string{"entity:read"}})
	krCode := kr["code"].(string)
	approved := r.Do(http.MethodPost, "/auth/key-request/"+krCode+"/approve", keyA, nil, nil)
	if approved.Status != http.StatusOK {
		t.Fatalf("approve: %d %s", approved.Status, approved.Body)
	}
	grantedID := approved.JSON(t)["keyId"].(string)
	if s := r.Do(http.MethodGet, "/auth/key-request/"+krCode+"/status", "", nil, nil); s.JSON(t)["status"] != "approved" {
		t.Fatalf("status: %s", s.Body)
	}
	pr := r.Do(http.MethodPost, "/auth/pair-request", "", nil, map[string]any{"worldId": "w-denied", "worldTitle": "Denied World"})
	if pr.Status != http.StatusCreated {
		t.Fatalf("pair request: %d %s", pr.Status, pr.Body)
	}
	if d := r.Do(http.MethodPost, "/auth/pair-request/"+pr.JSON(t)["code"].(string)+"/deny", keyA, nil, nil); d.Status != http.StatusOK {
		t.Fatalf("deny: %d %s", d.Status, d.Body)
	}

	// The operator suspends and resumes B.
	r.Do(http.MethodPost, "/accounts/"+acctB+"/suspend", r.AdminKey, nil, nil)
	r.Do(http.MethodPost, "/accounts/"+acctB+"/resume", r.AdminKey, nil, nil)

	mine, _ := auditRecords(t, r, keyA, "limit", "1000")
	for _, rec := range mine {
		if rec["accountId"] != acctA {
			t.Errorf("account A sees a record of %v: %v", rec["accountId"], rec)
		}
	}
	for _, want := range []struct {
		action, outcome, target string
		key                     string
	}{
		{"key.create", "ok", botID, idA},
		{"key.create", "refused", "", idA},
		{"key.revoke", "ok", botID, idA},
		// A code for a new world names none: the world gets its id when
		// it pairs.
		{"pairing.code", "ok", "", idA},
		{"pairing.pair", "ok", paired.ClientID, ""},
		{"key-request.approve", "ok", grantedID, idA},
		{"key-request.deliver", "ok", grantedID, ""},
		{"pair-request.deny", "ok", "", idA},
	} {
		rec := findRecord(mine, want.action, want.outcome)
		if rec == nil {
			t.Errorf("account A has no %s %s record among %v", want.outcome, want.action, mine)
			continue
		}
		if rec["target"] != want.target || rec["keyId"] != want.key || rec["address"] != "127.0.0.1" || rec["time"] == "" || rec["id"] == "" {
			t.Errorf("%s %s: %v; want target %q, key %q, address 127.0.0.1", want.outcome, want.action, rec, want.target, want.key)
		}
	}
	if rec := findRecord(mine, "key.create", "refused"); rec != nil && !strings.Contains(rec["detail"].(string), "demo") {
		t.Errorf("the refusal's record does not say why: %v", rec)
	}
	if rec := findRecord(mine, "key-request.approve", "ok"); rec != nil && !strings.Contains(rec["detail"].(string), "Audit bot") {
		t.Errorf("the approval's record does not name the app: %v", rec)
	}

	// The operator sees every record: its own, A's, and those of callers
	// nobody could identify.
	all, _ := auditRecords(t, r, r.AdminKey, "limit", "1000")
	for _, want := range []struct{ action, outcome, account, target string }{
		{"account.create", "ok", "operator", acctA},
		{"account.suspend", "ok", "operator", acctB},
		{"account.resume", "ok", "operator", acctB},
		{"key.list", "refused", "", ""},
		{"key-request.create", "ok", "", ""},
		{"pair-request.create", "ok", "", ""},
		{"key.create", "ok", acctA, botID},
	} {
		rec := findRecord(all, want.action, want.outcome)
		if rec == nil || rec["accountId"] != want.account || rec["target"] != want.target {
			t.Errorf("the operator's %s %s record: %v; want account %q, target %q", want.outcome, want.action, rec, want.account, want.target)
		}
	}

	// B sees none of A's records, whatever it asks for, over REST and
	// gRPC.
	theirs, _ := auditRecords(t, r, keyB, "limit", "1000")
	asB, _ := auditRecords(t, r, keyB, "accountId", acctA)
	if len(theirs) != 0 || len(asB) != 0 {
		t.Errorf("account B sees records: %v, asking for A's: %v", theirs, asB)
	}
	svc := relayv1.NewAuditServiceClient(r.Conn)
	as := func(key string) context.Context { return metadata.AppendToOutgoingContext(ctx, "x-api-key", key) }
	g, err := svc.ListAuditRecords(as(keyB), &relayv1.ListAuditRecordsRequest{AccountId: acctA})
	if err != nil || len(g.GetRecords()) != 0 {
		t.Errorf("gRPC: B asking for A's records: %v, %v", g.GetRecords(), err)
	}
	g, err = svc.ListAuditRecords(as(keyA), &relayv1.ListAuditRecordsRequest{Action: "key", Limit: 1000})
	// Three of A's own, and the key its approval of the key request made.
	if err != nil || len(g.GetRecords()) != 4 {
		t.Fatalf("gRPC: A's key records: %v, %v", g.GetRecords(), err)
	}
	for _, rec := range g.GetRecords() {
		if rec.GetAccountId() != acctA || !strings.HasPrefix(rec.GetAction(), "key.") {
			t.Errorf("gRPC: A's key records hold %v", rec)
		}
	}
	// A key without the scope 'admin' is refused; the refusal is itself
	// no audited action.
	reader, _ := r.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}})
	if _, err := svc.ListAuditRecords(as(reader), &relayv1.ListAuditRecordsRequest{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a key without 'admin': %v", err)
	}
}

// TestAuditListing pages with the cursor, caps the limit, filters by time
// and action, and refuses bad parameters naming them.
func TestAuditListing(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	start := time.Now().UTC().Add(-time.Second).Format(time.RFC3339)
	for i := range 3 {
		r.Do(http.MethodPost, "/keys", r.AdminKey, nil, map[string]any{"name": "k" + string(rune('0'+i)), "scopes": []string{"entity:read"}})
	}
	first, cursor := auditRecords(t, r, r.AdminKey, "action", "key.create", "limit", "2")
	if len(first) != 2 || cursor == "" {
		t.Fatalf("first page: %v, cursor %q", first, cursor)
	}
	rest, cursor2 := auditRecords(t, r, r.AdminKey, "action", "key.create", "limit", "2", "cursor", cursor)
	if len(rest) != 1 || cursor2 != "" || rest[0]["id"] == first[1]["id"] {
		t.Fatalf("second page: %v, cursor %q", rest, cursor2)
	}
	if recs, _ := auditRecords(t, r, r.AdminKey, "since", start, "action", "key"); len(recs) != 3 {
		t.Fatalf("since: %v", recs)
	}
	if recs, _ := auditRecords(t, r, r.AdminKey, "until", "2000-01-01T00:00:00Z"); len(recs) != 0 {
		t.Fatalf("until long ago: %v", recs)
	}
	if recs, _ := auditRecords(t, r, r.AdminKey, "limit", "100000"); len(recs) != 3 {
		t.Fatalf("a limit over the cap: %v", recs)
	}
	for _, tc := range []struct{ param, value string }{
		{"since", "yesterday"},
		{"until", "2026-13-01"},
		{"action", "key.*"},
		{"limit", "-1"},
		{"limit", "many"},
		{"cursor", "abc"},
	} {
		resp := r.Do(http.MethodGet, "/audit", r.AdminKey, relaytest.Q(tc.param, tc.value), nil)
		if resp.Status != http.StatusBadRequest || !strings.Contains(resp.ErrorText(t), tc.param) {
			t.Errorf("%s=%s: %d %s; want 400 naming it", tc.param, tc.value, resp.Status, resp.Body)
		}
	}
}

// TestAuditRetention forgets records older than --audit-retention: they
// are no longer listed, and the log prunes them.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t, func(c *node.Config) { c.AuditRetention = time.Second })
	r.Do(http.MethodPost, "/keys", r.AdminKey, nil, map[string]any{"name": "short-lived", "scopes": []string{"entity:read"}})
	if recs, _ := auditRecords(t, r, r.AdminKey, "action", "key.create"); len(recs) != 1 {
		t.Fatalf("fresh record: %v", recs)
	}
	time.Sleep(1500 * time.Millisecond)
	if recs, _ := auditRecords(t, r, r.AdminKey, "action", "key.create"); len(recs) != 0 {
		t.Fatalf("a record older than the retention is listed: %v", recs)
	}
	n, err := r.Audit().Prune(context.Background())
	if err != nil || n < 1 {
		t.Fatalf("prune: %d, %v", n, err)
	}
}
