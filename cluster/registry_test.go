package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/testports"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// localWorlds is a node's own worlds, by client id, for registries
// without a relay.
type localWorlds map[string]world.World

func (l localWorlds) World(_ context.Context, id string) (world.World, error) {
	if w, ok := l[id]; ok {
		return w, nil
	}
	return nil, world.Errorf(world.ErrNotFound, "Unknown world: %s", id)
}

func (l localWorlds) List(context.Context) ([]world.Info, error) {
	var out []world.Info
	for _, w := range l {
		out = append(out, w.Info())
	}
	return out, nil
}

func (l localWorlds) IDs(context.Context) ([]string, error) {
	var out []string
	for id := range l {
		out = append(out, id)
	}
	return out, nil
}

// plainWorld is a world with an id and nothing else.
type plainWorld struct{ id string }

func (w plainWorld) Info() world.Info { return world.Info{ClientID: w.id, Kind: world.KindEmbedded} }
func (plainWorld) ResolveUser(context.Context, string) (*world.User, error) {
	return nil, world.Errorf(world.ErrInvalid, "no users")
}
func (plainWorld) Users(context.Context) ([]world.User, error) { return nil, nil }
func (plainWorld) Can(*world.User, string) bool                { return true }

// TestRegistryBetweenNodes: a linked world moves to the node its tabletop
// reconnects to. Then: a host whose clock runs an hour behind still
// holds its world in the other nodes' eyes while it renews, and loses it
// within a lease once it stops: every node judges a lease from when it
// saw it written, on its own clock. Then: a world claimed before another
// node's watcher saw it resolves to its holder there all the same.
func TestRegistryBetweenNodes(t *testing.T) {
	const lease = 2 * time.Second
	// (clustertest.Configs, which imports this package, in short.)
	addrs := testports.Addrs(t, 2)
	cfgs := make([]Config, 2)
	for i := range cfgs {
		cfgs[i] = Config{NodeName: []string{"n1", "n2"}[i], DataDir: t.TempDir(), ClusterListen: addrs[i], ClusterPeers: addrs, LeaseTTL: lease, StartTimeout: 30 * time.Second}
	}
	nodes := make([]*Node, 2)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			var err error
			if err = cfgs[i].Check(); err == nil {
				nodes[i], err = Start(context.Background(), cfgs[i], nil)
			}
			if err != nil {
				t.Errorf("start node %d: %v", i+1, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	ctx := context.Background()
	regs := make([]*Registry, 2)
	locals := make([]localWorlds, 2)
	for i, n := range nodes {
		t.Cleanup(n.Close)
		local := localWorlds{}
		locals[i] = local
		if i == 0 {
			local["behind"] = plainWorld{"behind"}
		}
		reg, err := NewRegistry(ctx, n, RegistryOptions{Local: local, EmbeddedIDs: local.IDs,
			Serve: func(context.Context, *server.ForwardedCall) *server.ForwardedReply { return &server.ForwardedReply{} }})
		if err != nil {
			t.Fatal(err)
		}
		regs[i] = reg
		t.Cleanup(func() { reg.Close(context.Background()) })
	}
	// A linked world is hosted by the node that holds its socket: when
	// the tabletop reconnects to n2, n2 takes it over, and n1 (whose
	// renewal then fails) forwards its calls to n2.
	remoteOn := func(reg *Registry, id, host string) bool {
		w, err := reg.World(ctx, id)
		rw, ok := w.(*remoteWorld)
		return err == nil && ok && rw.Host() == host
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		// Generous for a loaded machine; a quiet one takes a moment.
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := regs[0].Claim(ctx, "tavern", world.KindLinked, "Tavern", true); err != nil {
		t.Fatal(err)
	}
	waitFor("n2 to forward the linked world to n1", func() bool { return remoteOn(regs[1], "tavern", "n1") })
	if err := regs[1].Claim(ctx, "tavern", world.KindLinked, "Tavern", true); err != nil {
		t.Fatal(err)
	}
	waitFor("n1 to forward the linked world to n2", func() bool { return remoteOn(regs[0], "tavern", "n2") })
	time.Sleep(lease / 2) // a round of n1's renewals must not take it back
	if !remoteOn(regs[0], "tavern", "n2") {
		t.Fatal("n1 took the linked world back")
	}
	regs[1].Release(ctx, "tavern") // its socket closed
	waitFor("the released linked world to be unavailable on n1", func() bool {
		_, err := regs[0].World(ctx, "tavern")
		return errors.Is(err, world.ErrUnavailable)
	})

	// n1's clock is an hour behind: the leases it writes "expired" an
	// hour ago by n2's clock.
	regs[0].mu.Lock()
	regs[0].now = func() time.Time { return time.Now().Add(-time.Hour) }
	regs[0].mu.Unlock()
	// Let n1 renew with its skewed clock, and n2 see it.
	time.Sleep(lease)
	for range 3 {
		w, err := regs[1].World(ctx, "behind")
		if err != nil {
			t.Fatalf("n2 resolving n1's world: %v", err)
		}
		if _, ok := w.(server.RemoteWorld); !ok {
			t.Fatalf("n2 resolved %T, want a remote world", w)
		}
		time.Sleep(lease / 3)
	}
	// Without the event bus (RegistryOptions.Events), a remote world
	// serves no event stream: the chain refuses them naming the host.
	w, err := regs[1].World(ctx, "behind")
	if err != nil {
		t.Fatal(err)
	}
	rw := w.(*remoteWorld)
	if rw.ServesStream(relayv1.EventService_SubscribeActors_FullMethodName) {
		t.Fatal("a remote world without the event bus serves event streams")
	}
	if _, err := rw.ResolveUser(ctx, "Alice"); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("ResolveUser without the event bus: %v, want unavailable", err)
	}
	if _, err := rw.Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor}); !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("Subscribe without the event bus: %v, want unavailable", err)
	}
	// n1 stops renewing (its renewals stop, as when it dies): the lease
	// runs out on n2's clock within a lease, even if n1's clock said
	// otherwise: an hour later. The deadline leaves a loaded machine
	// room to deliver the last renewal and answer the checks, and stays
	// far below the hour the skewed clock would give.
	close(regs[0].stop)
	<-regs[0].done
	deadline := time.Now().Add(2*lease + 5*time.Second)
	for {
		_, err := regs[1].World(ctx, "behind")
		if err != nil {
			if !errors.Is(err, world.ErrUnavailable) {
				t.Fatalf("after n1 stopped renewing: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("n1's world still resolves to n1 long after its last renewal")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A world claimed a moment ago, before n2's watcher delivered it, is
	// found in the bucket itself rather than called unknown; one that n2
	// also has on disk resolves to its holder, too.
	close(regs[1].stop)
	<-regs[1].done
	regs[1].watch.Stop()
	locals[1]["dup"] = plainWorld{"dup"}
	for _, id := range []string{"fresh", "dup"} {
		if err := regs[0].Claim(ctx, id, world.KindEmbedded, "", false); err != nil {
			t.Fatal(err)
		}
		w, err := regs[1].World(ctx, id)
		if err != nil {
			t.Fatalf("n2 resolving %s, just claimed by n1: %v", id, err)
		}
		if _, ok := w.(server.RemoteWorld); !ok {
			t.Fatalf("n2 resolved %s to %T, want a remote world", id, w)
		}
	}
}

// slowBucket is a bucket whose first watchers cannot be opened: their
// consumer's creation times out, as on a loaded machine or while the
// bucket's stream elects its first leader.
type slowBucket struct {
	jetstream.KeyValue
	failures int
	calls    int
}

func (b *slowBucket) WatchAll(context.Context, ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	b.calls++
	if b.calls <= b.failures {
		return nil, context.DeadlineExceeded
	}
	return openWatcher{}, nil
}

// openWatcher is a watcher that delivers nothing.
type openWatcher struct{}

func (openWatcher) Updates() <-chan jetstream.KeyValueEntry { return nil }
func (openWatcher) Stop() error                             { return nil }

// TestWatchAllWaitsForTheBucket: a node opening its watchers at start asks
// again while the bucket's consumer cannot be created in time, and gives
// up with the last error once its start time-out has passed.
func TestWatchAllWaitsForTheBucket(t *testing.T) {
	n := &Node{cfg: Config{StartTimeout: time.Minute}, log: slog.New(slog.DiscardHandler)}
	bucket := &slowBucket{failures: 3}
	if w, err := n.watchAll(context.Background(), bucket); err != nil || w == nil {
		t.Fatalf("after three slow attempts: %v, %v", w, err)
	}
	if bucket.calls != 4 {
		t.Fatalf("%d attempts, want 4", bucket.calls)
	}
	n.cfg.StartTimeout = 300 * time.Millisecond
	never := &slowBucket{failures: 1 << 30}
	if _, err := n.watchAll(context.Background(), never); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a bucket that never answers: %v", err)
	}
	// A caller that gives up ends the attempts.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.cfg.StartTimeout = time.Minute
	if _, err := n.watchAll(ctx, &slowBucket{failures: 1 << 30}); !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a cancelled start: %v", err)
	}
}

// TestReleaseAfterALateRenewal: a node releases a world whose last renewal
// was written although its answer never came (the node still has the
// revision before it), and leaves alone a world another node took.
func TestReleaseAfterALateRenewal(t *testing.T) {
	ctx := context.Background()
	addrs := testports.Addrs(t, 1)
	cfg := Config{NodeName: "n1", DataDir: t.TempDir(), ClusterListen: addrs[0], LeaseTTL: time.Minute, StartTimeout: time.Minute}
	if err := cfg.Check(); err != nil {
		t.Fatal(err)
	}
	n, err := Start(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	local := localWorlds{}
	reg, err := NewRegistry(ctx, n, RegistryOptions{Local: local, EmbeddedIDs: local.IDs,
		Serve: func(context.Context, *server.ForwardedCall) *server.ForwardedReply { return &server.ForwardedReply{} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close(ctx) })
	// overwrite writes a world's entry behind the registry's back, as a
	// renewal whose answer was lost, or another node, would.
	overwrite := func(id, node string) {
		t.Helper()
		reg.mu.RLock()
		rev := reg.owned[id].rev
		reg.mu.RUnlock()
		val, _ := json.Marshal(Entry{Node: node, Kind: world.KindLinked, Title: id, Expires: time.Now().Add(time.Minute), Lease: time.Minute})
		if _, err := reg.kv.Update(ctx, id, val, rev); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(id string) Entry {
		t.Helper()
		cur, err := reg.leaderGet(ctx, id)
		if err != nil || !cur.found {
			t.Fatalf("read %s: %v, found %v", id, err, cur.found)
		}
		var e Entry
		if err := json.Unmarshal(cur.value, &e); err != nil {
			t.Fatal(err)
		}
		return e
	}
	for _, id := range []string{"tavern", "inn"} {
		if err := reg.Claim(ctx, id, world.KindLinked, id, true); err != nil {
			t.Fatal(err)
		}
	}
	overwrite("tavern", "n1")
	overwrite("inn", "n2")
	reg.Release(ctx, "tavern")
	reg.Release(ctx, "inn")
	if e := entry("tavern"); !e.Released || e.Node != "n1" {
		t.Fatalf("after a late renewal, the release left %+v", e)
	}
	if e := entry("inn"); e.Released || e.Node != "n2" {
		t.Fatalf("the release of a world another node took left %+v", e)
	}
}
