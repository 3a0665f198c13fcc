package shared_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
	"github.com/tabletop-relay/relay/server/keys"
)

// TestKeysSurviveALostServer kills the NATS server that leads the keys
// bucket, without a word to the others, as SIGKILL would: the keys, kept
// three ways, keep working. A key created and one revoked while the
// server is gone reach every node, the one whose server died included once
// its connection moved to another server; each of those writes is one
// call, which waits out the bucket's election within its deadline.
func TestKeysSurviveALostServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("fault test")
	}
	c := jstest.Start(t, 3)
	nodes := openKeys(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, oldKey, err := nodes[0].Create(ctx, keys.Spec{Name: "old", Scopes: []string{keys.ScopeSearch}})
	if err != nil {
		t.Fatal(err)
	}
	dead := keysLeader(ctx, t, c)
	a, b := (dead+1)%3, (dead+2)%3
	killed := time.Now()
	c.Kill(dead)

	// The bucket has no leader until JetStream's raft notices the loss
	// (4 to 9 s) and elects one. The request's deadline is generous: the
	// race detector on a loaded machine slows the election too.
	wctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	fresh, _, err := nodes[a].Create(wctx, keys.Spec{Name: "fresh", Scopes: []string{keys.ScopeSearch}})
	if err != nil {
		t.Fatalf("create on node %d, %v after its leader's server died: %v", a+1, time.Since(killed).Round(time.Millisecond), err)
	}
	t.Logf("a key was created %v after the bucket's leader died", time.Since(killed).Round(time.Millisecond))
	if _, err := nodes[b].Authenticate(wctx, fresh); err != nil {
		t.Fatalf("node %d, a key created with a server gone: %v", b+1, err)
	}
	if _, err := nodes[b].Revoke(wctx, oldKey.ID); err != nil {
		t.Fatalf("revoke on node %d with a server gone: %v", b+1, err)
	}
	// The node whose server died: its connection moves to another one
	// and its watcher resumes.
	for {
		_, errOld := nodes[dead].Authenticate(wctx, old)
		_, errFresh := nodes[dead].Authenticate(wctx, fresh)
		if errors.Is(errOld, keys.ErrRevoked) && errFresh == nil {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("node %d after its server died: old key %v, fresh key %v", dead+1, errOld, errFresh)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// keysLeader returns the index of the server that leads the keys bucket.
func keysLeader(ctx context.Context, t *testing.T, c *jstest.Cluster) int {
	t.Helper()
	js := c.JetStream(0)
	for {
		s, err := js.Stream(ctx, "KV_"+shared.KeysBucket)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(ctx)
		}
		if err == nil && info.Cluster != nil {
			for i, srv := range c.Servers {
				if srv.Name() == info.Cluster.Leader {
					return i
				}
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("the keys bucket has no leader: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
