package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestClusterStatusCommand: `relay cluster status` prints the cluster as
// the relay it calls describes it, and says when a relay runs alone.
func TestClusterStatusCommand(t *testing.T) {
	cfg := clustertest.Configs(t, 1, 3*time.Second)[0]
	cfg.ClusterPeers = nil
	solo := relaytest.Start(t, func(c *node.Config) {
		cfg.DataDir = c.DataDir
		c.Cluster = cfg
	})
	alone := relaytest.Start(t)

	status := func(r *relaytest.Relay, args ...string) (string, error) {
		t.Setenv("RELAY_API_KEY", r.AdminKey)
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"cluster", "status", "--addr", r.Addr()}, args...), &out, &errOut)
		return out.String(), err
	}
	out, err := status(solo)
	if err != nil {
		t.Fatalf("cluster status: %v", err)
	}
	for _, want := range []string{"Node n1: connected (embedded NATS", "JetStream: ok, 1 replicas", "n1    live   demo   embedded  held until"} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	out, err = status(solo, "--json")
	if err != nil {
		t.Fatalf("cluster status --json: %v", err)
	}
	var env struct {
		Data cluster.Status `json:"data"`
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil || !env.Data.Enabled || env.Data.Node != "n1" {
		t.Fatalf("--json: %v\n%s", err, out)
	}
	if out, err = status(alone); err != nil || !strings.Contains(out, "runs alone") {
		t.Fatalf("relay alone: %v\n%s", err, out)
	}
	t.Setenv("RELAY_API_KEY", "rk_not_a_key")
	var sink bytes.Buffer
	err = run(context.Background(), []string{"cluster", "status", "--addr", solo.Addr()}, &sink, &sink)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("bad key: %v", err)
	}
	if err := run(context.Background(), []string{"cluster", "nope"}, &sink, &sink); err == nil || !strings.Contains(err.Error(), `unknown cluster command "nope"`) {
		t.Fatalf("unknown subcommand: %v", err)
	}
}
