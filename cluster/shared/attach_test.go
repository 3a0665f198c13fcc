package shared_test

import (
	"context"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world/events"
)

// TestAttachTwoNodes attaches two nodes: a key made on one works on the
// other, and each node's rate limiter takes half of the limit once both
// nodes are alive.
func TestAttachTwoNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 2)
	ctx := context.Background()
	var nodes []*shared.Attached
	var limiters []*server.RateLimiter
	for i, name := range []string{"a", "b"} {
		hub := events.New(events.Options{})
		t.Cleanup(hub.Close)
		l := server.NewRateLimiter(60, 4, nil)
		a, err := shared.Attach(ctx, c.JetStream(i), shared.AttachConfig{NodeName: name, Hub: hub})
		if err != nil {
			t.Fatal(err)
		}
		a.ShareLimits(l, nil)
		t.Cleanup(func() { _ = a.Close() })
		nodes = append(nodes, a)
		limiters = append(limiters, l)
	}
	plain, _, err := nodes[0].Keys.Create(ctx, keys.Spec{Name: "k", Scopes: []string{keys.ScopeSearch}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodes[1].Keys.Authenticate(ctx, plain); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for nodes[0].Presence.Count() != 2 || nodes[1].Presence.Count() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("live nodes: %d and %d, want 2", nodes[0].Presence.Count(), nodes[1].Presence.Count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, l := range limiters {
		allowed := 0
		for range 4 {
			if ok, _ := l.Allow("k"); ok {
				allowed++
			}
		}
		if allowed != 2 {
			t.Fatalf("node %d allowed %d of a burst of 4, want its half (2)", i+1, allowed)
		}
	}
}
