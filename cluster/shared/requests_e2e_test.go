package shared_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestRelaysShareRequests opens a key request and a pair request through
// one node, approves them through another and polls them through a third:
// the key is delivered once and every node knows it, and the tabletop
// pairs with the approved request's code and connects.
func TestRelaysShareRequests(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	nodes := make([]*relaytest.Relay, 3)
	for i := range nodes {
		nodes[i] = relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: string(rune('a' + i))}
			cfg.Demo = i == 0
		})
	}
	a, b, cn := nodes[0], nodes[1], nodes[2]

	resp := a.Do("POST", "/auth/key-request", "", nil, map[string]any{"appName": "bot", "scopes": []string{"entity:read", "search"}})
	if resp.Status != http.StatusCreated {
		t.Fatalf("open on a: %d %s", resp.Status, resp.Body)
	}
	code := resp.JSON(t)["code"].(string)
	if s := cn.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"pending"}` {
		t.Fatalf("pending on c: %d %s", s.Status, s.Body)
	}
	if r := b.Do("POST", "/auth/key-request/"+code+"/approve", a.AdminKey, nil, map[string]any{"scopes": []string{"entity:read"}}); r.Status != http.StatusOK {
		t.Fatalf("approve on b: %d %s", r.Status, r.Body)
	}
	got := cn.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil)
	apiKey, _ := got.JSON(t)["apiKey"].(string)
	if apiKey == "" {
		t.Fatalf("approved status on c: %s", got.Body)
	}
	if s := a.Do("GET", "/auth/key-request/"+code+"/status", "", nil, nil); string(s.Body) != `{"status":"exchanged"}` {
		t.Fatalf("status on a after delivery on c: %s", s.Body)
	}
	// The key works on the node holding the demo world, and every node
	// knows it (b does not host the demo world, so it answers that).
	if g := a.Do("GET", "/get", apiKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil); g.Status != http.StatusOK {
		t.Fatalf("read with the key on a: %d %s", g.Status, g.Body)
	}
	if g := b.Do("GET", "/get", apiKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil); g.Status == http.StatusUnauthorized {
		t.Fatalf("node b refuses the key: %d %s", g.Status, g.Body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tt := linktest.New(linktest.Config{RelayURL: a.Base, WorldID: "w1", WorldTitle: "World", ServerFingerprint: "fp1", ReconnectMaxAttempts: 1})
	if _, err := tt.PairByRequest(ctx, 50*time.Millisecond, func(p linktest.PairRequest) {
		if r := b.Do("POST", "/auth/pair-request/"+p.Code+"/approve", a.AdminKey, nil, nil); r.Status != http.StatusOK {
			t.Errorf("approve pair request on b: %d %s", r.Status, r.Body)
		}
	}); err != nil {
		t.Fatalf("pair by request through a, approved on b: %v", err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
}
