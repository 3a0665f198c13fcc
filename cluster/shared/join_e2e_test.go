package shared_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestSingleRelayJoinsACluster turns clustering on for a relay that ran
// alone: its admin key comes along and works on another node, no second
// admin key is made, and a restart of the node keeps it all.
func TestSingleRelayJoinsACluster(t *testing.T) {
	t.Parallel()
	alone := relaytest.Start(t)
	adminKey, dir := alone.AdminKey, alone.DataDir
	if err := alone.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	c := jstest.Start(t, 2)
	join := func(i int, name, dataDir string) *relaytest.Relay {
		return relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: name}
			if dataDir != "" {
				cfg.DataDir = dataDir
			}
		})
	}
	a := join(0, "a", dir)
	b := join(1, "b", "")
	if a.AdminKey != "" || b.AdminKey != "" {
		t.Fatalf("new admin keys: %q and %q; want none, the cluster has the first node's", a.AdminKey, b.AdminKey)
	}
	get := relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID)
	for _, r := range []*relaytest.Relay{a, b} {
		if resp := r.Do("GET", "/get", adminKey, get, nil); resp.Status != http.StatusOK {
			t.Fatalf("%s with the admin key of the relay that ran alone: %d %s", r.Base, resp.Status, resp.Body)
		}
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := join(0, "a", dir)
	if again.AdminKey != "" {
		t.Fatal("a restart made a new admin key")
	}
	if resp := again.Do("GET", "/get", adminKey, get, nil); resp.Status != http.StatusOK {
		t.Fatalf("after a restart: %d %s", resp.Status, resp.Body)
	}
}
