package cluster_test

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
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
		{cluster.Config{ClusterListen: "a:1", NodeName: "a", ClusterSecret: "hunter2hunter2"}, "--cluster-secret must be at least 32 bytes, not 14"},
		{cluster.Config{ClusterListen: "a:1", NodeName: "a", ClusterSecret: strings.Repeat("s", 32), ClusterSecretFile: "f"}, "exclude each other"},
		{cluster.Config{ClusterListen: "a:1", NodeName: "a", ClusterSecretFile: "/nonexistent/secret"}, "--cluster-secret-file"},
		{cluster.Config{ClusterListen: "127.0.0.1:1", NodeName: "a", ClusterTLSCert: "c"}, "--cluster-tls-cert, --cluster-tls-key and --cluster-tls-ca go together"},
		{cluster.Config{ClusterListen: "127.0.0.1:1", NodeName: "a", ClusterTLSCert: "/nonexistent/c", ClusterTLSKey: "/nonexistent/k", ClusterTLSCA: "/nonexistent/ca"}, "--cluster-tls-cert/--cluster-tls-key"},
		{cluster.Config{NATSURL: "nats://x", ClusterTLSCA: "ca"}, "--cluster-tls-ca secures the routes of the embedded NATS server"},
	} {
		err := tc.cfg.Check()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	// The secret from a file, white space around it ignored; a short one
	// there is refused as on the command line.
	dir := t.TempDir()
	good := strings.Repeat("0123456789abcdef", 4)
	for name, text := range map[string]string{"good": good + "\n", "short": "tooshort\n", "empty": "\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	fromFile := cluster.Config{ClusterListen: "a:1", NodeName: "a", ClusterSecretFile: filepath.Join(dir, "good")}
	if err := fromFile.Check(); err != nil || fromFile.ClusterSecret != good {
		t.Fatalf("secret from a file: %v, %q", err, fromFile.ClusterSecret)
	}
	for name, want := range map[string]string{"short": "at least 32 bytes, not 8", "empty": "is empty"} {
		c := cluster.Config{ClusterListen: "a:1", NodeName: "a", ClusterSecretFile: filepath.Join(dir, name)}
		if err := c.Check(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("secret file %s: %v, want %q", name, err, want)
		}
	}
	// A route port open beyond loopback needs a secret, or an explicit
	// --cluster-insecure.
	for _, listen := range []string{"0.0.0.0:6222", ":6222", "10.0.0.5:6222", "[::]:6222", "relay-1.internal:6222"} {
		c := cluster.Config{ClusterListen: listen, NodeName: "a"}
		if err := c.Check(); err == nil || !strings.Contains(err.Error(), "--cluster-listen "+listen+" is open beyond loopback, and no --cluster-secret") || !strings.Contains(err.Error(), "--cluster-insecure") {
			t.Errorf("%s without a secret: %v", listen, err)
		}
		c = cluster.Config{ClusterListen: listen, NodeName: "a", ClusterInsecure: true}
		if err := c.Check(); err != nil {
			t.Errorf("%s with --cluster-insecure: %v", listen, err)
		}
		c = cluster.Config{ClusterListen: listen, NodeName: "a", ClusterSecret: good}
		if err := c.Check(); err != nil {
			t.Errorf("%s with a secret: %v", listen, err)
		}
	}
	for _, listen := range []string{"127.0.0.1:6222", "localhost:6222", "[::1]:6222"} {
		c := cluster.Config{ClusterListen: listen, NodeName: "a"}
		if err := c.Check(); err != nil {
			t.Errorf("%s without a secret: %v", listen, err)
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

// TestClusterSecretLimitsWrongPasswords: nodes that share a secret form a
// cluster; on a node's route port, an address that presents wrong secrets
// is refused, and past its allowance it is refused with the right secret
// too.
func TestClusterSecretLimitsWrongPasswords(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("0123456789abcdef", 3)
	cfgs := clustertest.Configs(t, 3, time.Second)
	for i := range cfgs {
		cfgs[i].ClusterSecret = secret
	}
	nodes := startNodes(t, cfgs)
	if nodes[0].Replicas() != 3 {
		t.Fatalf("replicas %d, want 3: the nodes did not form a cluster with their secret", nodes[0].Replicas())
	}
	route := func(pass string) string {
		t.Helper()
		// Deadlines that a loaded machine meets: a refusal comes at once
		// on a quiet one.
		conn, err := net.DialTimeout("tcp", cfgs[0].ClusterListen, 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
		r := bufio.NewReader(conn)
		if _, err := r.ReadString('\n'); err != nil { // the server's INFO
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT {\"verbose\":false,\"pedantic\":false,\"user\":%q,\"pass\":%q,\"name\":\"intruder\",\"cluster\":\"relay\"}\r\nPING\r\n", "relay", pass)
		line, err := r.ReadString('\n')
		if err != nil {
			return fmt.Sprintf("%q, then %v", line, err)
		}
		return strings.TrimSpace(line)
	}
	for i := range cluster.RouteFailuresPerMinute {
		if got := route("wrong-secret-" + fmt.Sprint(i)); !strings.Contains(got, "Authorization Violation") {
			t.Fatalf("wrong secret %d: %q, want an authorization violation", i+1, got)
		}
	}
	if got := route(secret); !strings.Contains(got, "Authorization Violation") {
		t.Fatalf("the right secret from an address past its allowance: %q, want an authorization violation", got)
	}
}
