package cluster_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestDeleteWorldThroughAnyNode removes an embedded world, hosted by one
// node of three and followed by the two others, through a node that does
// not host it: the call reaches the host, which removes the world; every
// node then answers 404 for it, its replicated log is gone, the
// followers' copies are removed, and no node brings the world back once
// its lease would have run out. Its snapshots are removed too.
func TestDeleteWorldThroughAnyNode(t *testing.T) {
	nodes, cfgs := startReplicated(t, withSnapshots)
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	if st := flagWrite(client, n1.Base, n1.AdminKey, "first", 1); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}
	writeFlags(t, n1, "a", snapshotEvery+2, map[string]int{})
	waitFor(t, 30*time.Second, "a snapshot of west", func() bool { return len(westSnapshots(t, n1)) > 0 })

	if r := n1.Do(http.MethodDelete, "/worlds/west", n1.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("DELETE /worlds/west through %s (west is on %s): %d %s", cfgs[0].NodeName, cfgs[1].NodeName, r.Status, r.Body)
	}
	if _, err := os.Stat(filepath.Join(cfgs[1].DataDir, "worlds", "west")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the host still has west's directory: %v", err)
	}
	for i, n := range nodes {
		waitFor(t, 30*time.Second, "404 for west on "+cfgs[i].NodeName, func() bool {
			return n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil).Status == http.StatusNotFound
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := n2.Cluster().JetStream().Stream(ctx, "RELAY_WORLD_west"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("west's replicated log after the removal: %v, want no such stream", err)
	}
	if seqs := westSnapshots(t, n2); len(seqs) != 0 {
		t.Fatalf("west's snapshots after the removal: %v, want none", seqs)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the removal of west's copy on "+cfgs[i].NodeName, func() bool {
			_, err := os.Stat(filepath.Join(cfgs[i].DataDir, "replicas", "west"))
			return errors.Is(err, os.ErrNotExist)
		})
	}
	// Past the lease: nobody took the world over.
	time.Sleep(2 * clusterLease)
	for i, n := range nodes {
		if r := n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil); r.Status != http.StatusNotFound {
			t.Fatalf("west on %s after its lease: %d %s", cfgs[i].NodeName, r.Status, r.Body)
		}
	}
}
