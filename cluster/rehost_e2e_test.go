package cluster_test

import (
	"net/http"
	"testing"
	"time"
)

// TestHostWithoutItsWorldGivesItUp checks that a node that holds the
// lease of a replicated world which is no longer among its worlds (a
// claim round claimed it again just as the node, replaced by another
// node's append, moved its copy aside to follow it) gives the lease up
// when it starts replicating the world, so that a follower takes the
// world over and serves it, with its writes, instead of every node
// answering 404 for it while the lease is renewed.
func TestHostWithoutItsWorldGivesItUp(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	if st := flagWrite(client, n1.Base, n1.AdminKey, "first", 1); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 30*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}

	if err := n2.Registry().MoveAside("west"); err != nil {
		t.Fatal(err)
	}
	n2.Registry().Rehost("west")
	waitFor(t, 60*time.Second, "a write through n1 once n2 gave west up", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "after", 2) == http.StatusOK
	})
	for _, h := range n1.Registry().Snapshot() {
		if h.ClientID == "west" && h.Node == "n2" {
			t.Fatalf("west is still on n2: %+v", h)
		}
	}
	flags, st := ariaFlags(t, n1)
	if st != http.StatusOK || flags["first"] != float64(1) || flags["after"] != float64(2) {
		t.Fatalf("west after n2 gave it up: %d %v", st, flags)
	}
}
