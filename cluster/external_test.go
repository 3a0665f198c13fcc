package cluster_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/relaytest"
)

// startNATS runs a NATS server with JetStream on a random loopback port,
// as an operator's existing NATS system, with a user and password; it
// returns the URL without credentials.
func startNATS(t *testing.T, user, password string) string {
	t.Helper()
	srv, err := natsserver.NewServer(&natsserver.Options{
		Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		Username: user, Password: password, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("NATS server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv.ClientURL()
}

// TestExternalNATS: two relays connected to an existing NATS system
// (--nats, here with credentials in the URL) form one service: a call for
// a world of one is served through the other. A wrong password is refused
// at start with a message that does not show it.
func TestExternalNATS(t *testing.T) {
	url := startNATS(t, "relay", "s3cret")
	withCreds := strings.Replace(url, "nats://", "nats://relay:s3cret@", 1)
	a := clusterNode(t, cluster.Config{NodeName: "a", DataDir: t.TempDir(), NATSURL: withCreds, LeaseTTL: 3 * time.Second, ForwardTimeout: 10 * time.Second}, true)
	bDir := t.TempDir()
	seedWorld(t, bDir, "east")
	b := clusterNode(t, cluster.Config{NodeName: "b", DataDir: bDir, NATSURL: withCreds, LeaseTTL: 3 * time.Second, ForwardTimeout: 10 * time.Second}, false)
	shareAdminKey(a, b)
	t.Cleanup(func() { stopAll([]*relaytest.Relay{a, b}) })
	if a.Cluster().Replicas() != 1 {
		t.Fatalf("replicas on a one-server NATS system: %d", a.Cluster().Replicas())
	}
	var got relaytest.Response
	waitUntil(t, "world east through a", func() bool {
		got = a.Do(http.MethodGet, "/get", a.AdminKey, relaytest.Q("clientId", "east", "uuid", relaytest.AriaUUID), nil)
		return got.Status == http.StatusOK
	})
	waitUntil(t, "world demo through b", func() bool {
		got = b.Do(http.MethodGet, "/get", b.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil)
		return got.Status == http.StatusOK
	})

	bad := cluster.Config{NodeName: "c", DataDir: t.TempDir(), NATSURL: strings.Replace(url, "nats://", "nats://relay:wrong@", 1), StartTimeout: 5 * time.Second}
	if err := bad.Check(); err != nil {
		t.Fatal(err)
	}
	_, err := cluster.Start(t.Context(), bad, nil)
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong password: %v", err)
	}
	// The embedded data directory is not used with --nats.
	if _, err := os.Stat(filepath.Join(bDir, "nats")); err == nil {
		t.Fatal("a relay on an existing NATS system made a JetStream directory")
	}
}
