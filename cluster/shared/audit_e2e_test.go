package shared_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestRelaysShareAuditLog records actions on two nodes of a cluster and
// lists them from the other: every node shows every record, an account
// only its own, and the audit stream holds the records no longer than the
// retention and no more than the count.
func TestRelaysShareAuditLog(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 2)
	nodes := make([]*relaytest.Relay, 2)
	for i := range nodes {
		nodes[i] = relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: string(rune('a' + i))}
			cfg.Demo = i == 0
			cfg.AuditRetention = time.Hour
			cfg.AuditMaxRecords = 500
		})
	}
	a, b := nodes[0], nodes[1]

	made := a.Do(http.MethodPost, "/accounts", a.AdminKey, nil, map[string]any{"name": "Clustered"})
	if made.Status != http.StatusOK {
		t.Fatalf("create account on a: %d %s", made.Status, made.Body)
	}
	acct := made.Data(t)["account"].(map[string]any)["id"].(string)
	gmKey := made.Data(t)["key"].(string)
	if r := b.Do(http.MethodPost, "/keys", gmKey, nil, map[string]any{"name": "bot", "scopes": []string{"entity:read"}}); r.Status != http.StatusOK {
		t.Fatalf("create key on b: %d %s", r.Status, r.Body)
	}

	list := func(r *relaytest.Relay, key string, query ...string) []any {
		t.Helper()
		resp := r.Do(http.MethodGet, "/audit", key, relaytest.Q(query...), nil)
		if resp.Status != http.StatusOK {
			t.Fatalf("GET /audit: %d %s", resp.Status, resp.Body)
		}
		return resp.Data(t)["records"].([]any)
	}
	// The operator sees on b what a recorded, and the account sees on a
	// what b recorded, and nothing else.
	var created bool
	for _, v := range list(b, a.AdminKey, "action", "account") {
		if rec := v.(map[string]any); rec["action"] == "account.create" && rec["target"] == acct {
			created = true
		}
	}
	if !created {
		t.Errorf("node b does not show the account made on a")
	}
	own := list(a, gmKey)
	if len(own) != 1 || own[0].(map[string]any)["action"] != "key.create" || own[0].(map[string]any)["accountId"] != acct {
		t.Errorf("the account's records on a: %v", own)
	}
	if p := list(a, a.AdminKey, "action", "key.create", "limit", "1"); len(p) != 1 {
		t.Errorf("a page of one: %v", p)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.JetStream(0).Stream(ctx, shared.AuditStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	if cfg.MaxAge != time.Hour || cfg.MaxMsgs != 500 || cfg.Discard != jetstream.DiscardOld {
		t.Errorf("the audit stream keeps %s and %d records (discard %v); want the retention, the count, the oldest leaving first", cfg.MaxAge, cfg.MaxMsgs, cfg.Discard)
	}
}
