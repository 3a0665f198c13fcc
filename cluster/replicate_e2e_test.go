package cluster_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// startReplicated starts three relays as one cluster that keeps two
// copies of each embedded world besides its host's; n2 hosts the world
// "west".
func startReplicated(t *testing.T) ([]*relaytest.Relay, []cluster.Config) {
	t.Helper()
	cfgs := clustertest.Configs(t, 3, clusterLease)
	for i := range cfgs {
		cfgs[i].WorldReplicas = 2
	}
	seedWorld(t, cfgs[1].DataDir, "west")
	nodes := make([]*relaytest.Relay, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { nodes[i] = clusterNode(t, cfgs[i], false) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	shareAdminKey(nodes...)
	t.Cleanup(func() { stopAll(nodes) })
	return nodes, cfgs
}

// waitFor polls cond until it holds or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// copyComplete reports whether a node's follower copy of a world holds
// the whole world (a base) and at least the record after.
func copyComplete(dataDir, clientID string, after uint64) bool {
	seq, _, complete, err := world.ReplicaState(filepath.Join(dataDir, "replicas", clientID, "world.db"))
	return err == nil && complete && seq > after
}

// flagWrite sets flags.test.<key> on Aria in west through a node, and
// reports the HTTP status (0 when the node could not be reached).
func flagWrite(client *http.Client, base, key, name string, value int) int {
	body, _ := json.Marshal(map[string]any{"data": map[string]any{"flags": map[string]any{"test": map[string]any{name: value}}}})
	req, err := http.NewRequest(http.MethodPut, base+"/update?clientId=west&uuid="+relaytest.AriaUUID, bytes.NewReader(body))
	if err != nil {
		return 0
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// ariaFlags reads Aria's flags.test from west through a node.
func ariaFlags(t *testing.T, via *relaytest.Relay) (map[string]any, int) {
	t.Helper()
	got := via.Do(http.MethodGet, "/get", via.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
	if got.Status != http.StatusOK {
		t.Logf("read: %d %s", got.Status, got.Body)
		return nil, got.Status
	}
	data := got.Data(t)
	flags, _ := data["flags"].(map[string]any)
	test, _ := flags["test"].(map[string]any)
	return test, got.Status
}

// TestReplicatedWorldOutlivesItsHost checks that the followers of a world
// hold copies of it, that when its host dies (its NATS server stops at
// once, as with a SIGKILL) a follower takes the world over and serves
// writes through every other node, and that no write acknowledged before,
// during or after the failover is lost.
func TestReplicatedWorldOutlivesItsHost(t *testing.T) {
	nodes, cfgs := startReplicated(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}

	// Both other nodes follow west and hold a whole copy of it.
	if st := flagWrite(client, n1.Base, n1.AdminKey, "first", 1); st != http.StatusOK {
		t.Fatalf("first write: %d", st)
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 15*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}

	// Writers through n1 and n3 all along; every acknowledged key must
	// survive.
	var acked sync.Map
	var okCount, failCount atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w, via := range []*relaytest.Relay{n1, n3} {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d_%d", w, i)
				if st := flagWrite(client, via.Base, via.AdminKey, name, i); st == http.StatusOK {
					acked.Store(name, i)
					okCount.Add(1)
				} else {
					failCount.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	waitFor(t, 10*time.Second, "writes before the failure", func() bool { return okCount.Load() >= 20 })

	died := time.Now()
	n2.Cluster().Crash()
	before := okCount.Load()
	// A write through another node succeeds again once a follower took
	// the world over: within the lease, the stream's election and a
	// margin for a loaded machine.
	waitFor(t, 30*time.Second, "a write acknowledged after the host died", func() bool { return okCount.Load() > before+10 })
	t.Logf("writes acknowledged again %v after the host died", time.Since(died).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	t.Logf("%d writes acknowledged, %d refused or failed", okCount.Load(), failCount.Load())

	// Every acknowledged write is in the world, read through both nodes.
	for _, via := range []*relaytest.Relay{n1, n3} {
		// A node's view of the registry may lag while JetStream recovers
		// from the loss of a server: the read may be refused for a while.
		var flags map[string]any
		waitFor(t, 15*time.Second, "a read of west", func() bool {
			var st int
			flags, st = ariaFlags(t, via)
			return st == http.StatusOK
		})
		lost := 0
		acked.Range(func(k, v any) bool {
			if got, ok := flags[k.(string)]; !ok || got != float64(v.(int)) {
				lost++
			}
			return true
		})
		if lost > 0 {
			t.Fatalf("%d acknowledged writes lost", lost)
		}
		if flags["first"] != float64(1) {
			t.Fatalf("the first write is lost: %v", flags["first"])
		}
	}
}
