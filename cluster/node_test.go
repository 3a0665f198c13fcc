package cluster_test

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
)

// startNodes starts the nodes of cfgs at once (a JetStream cluster forms
// only when its peers are up) and closes them at the end of the test.
func startNodes(t *testing.T, cfgs []cluster.Config) []*cluster.Node {
	t.Helper()
	nodes := make([]*cluster.Node, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i, cfg := range cfgs {
		wg.Go(func() {
			if err := cfg.Check(); err != nil {
				errs[i] = err
				return
			}
			nodes[i], errs[i] = cluster.Start(context.Background(), cfg, testLog(t))
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("start node %d: %v", i+1, err)
		}
		t.Cleanup(nodes[i].Close)
	}
	return nodes
}

// TestNodesShareJetStream: three embedded nodes form one JetStream cluster
// whose key-value buckets are replicated three ways and read alike from
// every node.
func TestNodesShareJetStream(t *testing.T) {
	nodes := startNodes(t, clustertest.Configs(t, 3, time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range nodes {
		if n.Replicas() != 3 {
			t.Fatalf("%s: replicas %d, want 3", n.Name(), n.Replicas())
		}
	}
	kv, err := nodes[0].KeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test", Replicas: nodes[0].Replicas()})
	if err != nil {
		t.Fatalf("create bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("put: %v", err)
	}
	// A replica that has just been placed answers direct reads only once it
	// holds the stream ("no responders" until then), so each node's read is
	// retried until the test's deadline.
	for _, n := range nodes {
		for {
			kv, err := n.JetStream().KeyValue(ctx, "test")
			if err == nil {
				var e jetstream.KeyValueEntry
				if e, err = kv.Get(ctx, "k"); err == nil {
					if string(e.Value()) != "v" {
						t.Fatalf("%s: get: %q, want v", n.Name(), e.Value())
					}
					break
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: read the bucket: %v", n.Name(), err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// TestSingleEmbeddedNode: a node with --cluster-listen and no peers runs
// JetStream alone, with one replica.
func TestSingleEmbeddedNode(t *testing.T) {
	cfgs := clustertest.Configs(t, 1, time.Second)
	cfgs[0].ClusterPeers = nil
	nodes := startNodes(t, cfgs)
	if nodes[0].Replicas() != 1 {
		t.Fatalf("replicas %d, want 1", nodes[0].Replicas())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := nodes[0].KeyValue(ctx, jetstream.KeyValueConfig{Bucket: "test"}); err != nil {
		t.Fatalf("create bucket: %v", err)
	}
}

// TestConfigCheck: impossible combinations of flags are refused, naming
// the flag.
func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		cfg  cluster.Config
		want string
	}{
		{cluster.Config{NATSCreds: "x"}, "--nats-creds needs --nats"},
		{cluster.Config{NATSURL: "nats://x", ClusterListen: "a:1"}, "cannot be combined"},
		{cluster.Config{ClusterPeers: []string{"a:1"}}, "--cluster-peers needs --cluster-listen"},
		{cluster.Config{ClusterListen: "nope"}, "--cluster-listen must be host:port"},
		{cluster.Config{ClusterListen: "a:1", NodeName: "a.b"}, "--node-name"},
		{cluster.Config{NATSURL: "nats://x", NATSTLSCert: "c"}, "go together"},
	} {
		err := tc.cfg.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	var off cluster.Config
	if err := off.Check(); err != nil || off.Enabled() {
		t.Fatalf("zero config: %v, enabled %v", err, off.Enabled())
	}
}

// testLog is the nodes' log in tests: nothing, unless RELAY_TEST_NATS_LOG
// asks for everything.
func testLog(t *testing.T) *slog.Logger {
	if os.Getenv("RELAY_TEST_NATS_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	level := slog.LevelDebug
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
