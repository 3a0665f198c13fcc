package shared_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/server/keys"
)

// TestKeysSurviveALostServer stops one of three NATS servers: the keys,
// kept three ways, keep working; a key created and one revoked while the
// server is gone reach every node, the one whose server died included
// once its connection moved to another server.
func TestKeysSurviveALostServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault test")
	}
	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	// JetStream's election after a lost server took over 30 s once under
	// the whole suite with the race detector on two cores, and over 90 s
	// with two busy loops besides; the bound is generous so that only a
	// real failure to recover fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	old, oldKey, err := nodes[0].Create(ctx, keys.Spec{Name: "old", Scopes: []string{keys.ScopeSearch}})
	if err != nil {
		t.Fatal(err)
	}
	c.Servers[2].Shutdown()
	c.Servers[2].WaitForShutdown()

	// A write needs the bucket's leader; after a lost server JetStream
	// may take a moment to elect a new one.
	var fresh string
	for {
		fresh, _, err = nodes[1].Create(ctx, keys.Spec{Name: "fresh", Scopes: []string{keys.ScopeSearch}})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create with a server gone: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := nodes[0].Authenticate(ctx, fresh); err != nil {
		t.Fatalf("node 1, a key created with a server gone: %v", err)
	}
	if _, err := nodes[0].Revoke(ctx, oldKey.ID); err != nil {
		t.Fatal(err)
	}
	// Node 3 lost its server: its connection moves to another one and
	// its watcher resumes.
	for {
		_, errOld := nodes[2].Authenticate(ctx, old)
		_, errFresh := nodes[2].Authenticate(ctx, fresh)
		if errors.Is(errOld, keys.ErrRevoked) && errFresh == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("node 3 after its server died: old key %v, fresh key %v", errOld, errFresh)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
