package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// startReplicated starts three relays as one cluster that keeps two
// copies of each embedded world besides its host's; n2 hosts the world
// "west".
func startReplicated(t *testing.T, mutate func(*node.Config)) ([]*relaytest.Relay, []cluster.Config) {
	t.Helper()
	cfgs := clustertest.Configs(t, 3, clusterLease)
	for i := range cfgs {
		cfgs[i].WorldReplicas = 2
	}
	seedWorld(t, cfgs[1].DataDir, "west")
	nodes := make([]*relaytest.Relay, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			nodes[i] = relaytest.StartLogged(t, testLog(t).With("relay", cfgs[i].NodeName), func(c *node.Config) {
				c.DataDir = cfgs[i].DataDir
				c.Demo = false
				c.Cluster = cfgs[i]
				if mutate != nil {
					mutate(c)
				}
			})
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	shareAdminKey(nodes...)
	t.Cleanup(func() { stopAll(nodes) })
	waitReplicatedReady(t, nodes, cfgs)
	return nodes, cfgs
}

// waitReplicatedReady waits until the cluster startReplicated made has
// settled, so that a test's first call does not meet its start under way
// (on a loaded machine it takes a while): every node answers a read of
// west, so it knows west's host and the cluster's admin key; both
// followers hold west's base, so its log exists and takes appends; and
// the log is led by its host's server, where the host moves it right
// after its claim. Nothing is written.
func waitReplicatedReady(t *testing.T, nodes []*relaytest.Relay, cfgs []cluster.Config) {
	t.Helper()
	for i, n := range nodes {
		waitFor(t, 60*time.Second, "a read of west through "+cfgs[i].NodeName, func() bool {
			got := n.Do(http.MethodGet, "/get", n.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
			return got.Status == http.StatusOK
		})
	}
	for _, i := range []int{0, 2} {
		waitFor(t, 60*time.Second, "west's base in the copy of "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 0) })
	}
	host := nodes[1].Cluster().Conn().ConnectedServerName()
	waitFor(t, 60*time.Second, "west's log led by its host", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := nodes[0].Cluster().JetStream().Stream(ctx, "RELAY_WORLD_west")
		return err == nil && s.CachedInfo().Cluster != nil && s.CachedInfo().Cluster.Leader == host
	})
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

// writeFirst sets flags.test.first to 1 on Aria in west through via,
// again while the answer is a 503 (the world's log may be moving its
// leader to the host just after the start), and waits until the copies
// of west on n1 and n3 (its followers) hold it.
func writeFirst(t *testing.T, client *http.Client, via *relaytest.Relay, cfgs []cluster.Config) {
	t.Helper()
	last := 0
	waitFor(t, 30*time.Second, "a first write through "+via.Cluster().Name(), func() bool {
		last = flagWrite(client, via.Base, via.AdminKey, "first", 1)
		if last != http.StatusOK && last != http.StatusServiceUnavailable {
			t.Fatalf("first write: %d", last)
		}
		return last == http.StatusOK
	})
	for _, i := range []int{0, 2} {
		waitCopy(t, cfgs[i], 1)
	}
}

// waitCopy waits until a node's follower copy of west holds the whole
// world and at least the record after after, and says what the copy held
// when it does not in time.
func waitCopy(t *testing.T, cfg cluster.Config, after uint64) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for !copyComplete(cfg.DataDir, "west", after) {
		if time.Now().After(deadline) {
			seq, base, complete, err := world.ReplicaState(filepath.Join(cfg.DataDir, "replicas", "west", "world.db"))
			t.Fatalf("timed out waiting for the copy of west on %s to hold record %d: it holds up to %d (base %q, whole %v, error %v)", cfg.NodeName, after+1, seq, base, complete, err)
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
	nodes, cfgs := startReplicated(t, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}

	// Both other nodes follow west and hold a whole copy of it.
	writeFirst(t, client, n1, cfgs)

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
	waitFor(t, 45*time.Second, "writes before the failure", func() bool { return okCount.Load() >= 20 })

	died := time.Now()
	n2.Cluster().Crash()
	before := okCount.Load()
	// A write through another node succeeds again once a follower took
	// the world over: within the lease, the stream's election and a
	// margin for a loaded machine.
	waitFor(t, 45*time.Second, "a write acknowledged after the host died", func() bool { return okCount.Load() > before+10 })
	t.Logf("writes acknowledged again %v after the host died", time.Since(died).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	t.Logf("%d writes acknowledged, %d refused or failed", okCount.Load(), failCount.Load())

	// Every acknowledged write is in the world, read through both nodes.
	for _, via := range []*relaytest.Relay{n1, n3} {
		// A node's view of the registry may lag while JetStream recovers
		// from the loss of a server: the read may be refused for a while.
		var flags map[string]any
		waitFor(t, 45*time.Second, "a read of west", func() bool {
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

// TestCallsAroundAHostFailure checks what a call forwarded to a host that
// dies gets, with a forward time-out far longer than the failover:
//   - a write under way when the host dies is a 503 saying its outcome is
//     unknown, within two seconds of the death (here NATS learns of it at
//     once), not after the forward time-out;
//   - a read, and a write, sent while the dead host's lease still holds
//     wait for the follower that takes the world over and succeed there.
func TestCallsAroundAHostFailure(t *testing.T) {
	nodes, cfgs := startReplicated(t, func(c *node.Config) {
		c.Cluster.ForwardTimeout = 30 * time.Second
		c.ScriptTimeout = 20 * time.Second
		// A lease that outlasts the host's crash, which takes a loaded
		// machine seconds: the calls below must be sent while it holds.
		c.Cluster.LeaseTTL = 10 * time.Second
	})
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 40 * time.Second}
	writeFirst(t, client, n1, cfgs)

	// A script (a write) that runs for 15 s on the host, through n1.
	slow := map[string]any{"script": "const start = Date.now(); while (Date.now() - start < 15000) {} return 7;"}
	answered := make(chan relaytest.Response, 1)
	go func() {
		body, _ := json.Marshal(slow)
		req, _ := http.NewRequest(http.MethodPost, n1.Base+"/execute-js?clientId=west", bytes.NewReader(body))
		req.Header.Set("x-api-key", n1.AdminKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			answered <- relaytest.Response{}
			return
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		answered <- relaytest.Response{Status: resp.StatusCode, Body: buf.Bytes()}
	}()
	// The call reaches n2, which runs it: its outcome is unknown from
	// then on.
	waitFor(t, 30*time.Second, "the script under way on n2", func() bool { return n2.Registry().AnswersUnderWay() > 0 })
	crashing := time.Now()
	n2.Cluster().Crash()
	// The server is gone, its routes with it: NATS knows of the death.
	died := time.Now()
	t.Logf("the host's NATS server took %v to stop", died.Sub(crashing).Round(time.Millisecond))

	// Calls sent right after the death, while its lease holds on the
	// other nodes: they wait for the new host.
	type result struct {
		what   string
		status int
		took   time.Duration
	}
	results := make(chan result, 2)
	for _, h := range n3.Registry().Snapshot() {
		if h.ClientID == "west" && (h.Node != "n2" || !h.Live) {
			t.Fatalf("the dead host's lease no longer holds on n3 when the calls are sent: %+v", h)
		}
	}
	go func() {
		// The test's own client: the read waits for the lease to lapse
		// and a follower to take over, longer than a relaytest call may.
		start := time.Now()
		st := 0
		req, _ := http.NewRequest(http.MethodGet, n3.Base+"/get?clientId=west&uuid="+relaytest.AriaUUID, nil)
		req.Header.Set("x-api-key", n3.AdminKey)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			st = resp.StatusCode
		}
		results <- result{"read through n3", st, time.Since(start)}
	}()
	go func() {
		start := time.Now()
		st := flagWrite(client, n3.Base, n3.AdminKey, "afterDeath", 2)
		results <- result{"write through n3", st, time.Since(start)}
	}()

	select {
	case got := <-answered:
		took := time.Since(died)
		t.Logf("the write under way was answered %v after the death: %d %s", took.Round(time.Millisecond), got.Status, got.Body)
		if got.Status != http.StatusServiceUnavailable || !bytes.Contains(got.Body, []byte("whether it was applied is unknown")) {
			t.Fatalf("write under way: %d %s", got.Status, got.Body)
		}
		if took > 2*time.Second {
			t.Fatalf("the write under way was answered %v after the death, want at most 2s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write under way was not answered within 10 s of its host's death")
	}
	for range 2 {
		r := <-results
		t.Logf("%s: %d after %v", r.what, r.status, r.took.Round(time.Millisecond))
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d", r.what, r.status)
		}
	}
	flags, st := ariaFlags(t, n1)
	if st != http.StatusOK || flags["afterDeath"] != float64(2) || flags["first"] != float64(1) {
		t.Fatalf("west after the failover: %d %v", st, flags)
	}
}

// TestEventsContinueAcrossAFailover checks that a world's event ids go on
// from where they were when a follower takes the world over: streams open
// on the other nodes receive the new host's events after the old host's,
// without a reset, and a stream opened on any node with Last-Event-ID
// resumes there.
func TestEventsContinueAcrossAFailover(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	writeFirst(t, client, n1, cfgs)
	const path = "/actor/subscribe?clientId=west"
	streams := map[string]<-chan streamEvent{
		"n1": sseStream(t, ctx, n1, path, n1.AdminKey, ""),
		"n3": sseStream(t, ctx, n3, path, n3.AdminKey, ""),
	}
	for what, s := range streams {
		if ev := take(t, what, s, 1)[0]; ev.Name != "connected" {
			t.Fatalf("%s: first event %s", what, ev.Name)
		}
	}
	if st := flagWrite(client, n3.Base, n3.AdminKey, "before", 1); st != http.StatusOK {
		t.Fatalf("write before: %d", st)
	}
	var before uint64
	for what, s := range streams {
		ev := take(t, what, s, 1)[0]
		if before != 0 && ev.ID != before {
			t.Fatalf("%s: event %d, the other node's %d", what, ev.ID, before)
		}
		before = ev.ID
	}

	n2.Cluster().Crash()
	waitFor(t, 45*time.Second, "a write after the failover", func() bool {
		return flagWrite(client, n3.Base, n3.AdminKey, "after", 2) == http.StatusOK
	})
	// One write may make events on other channels too: ids count every
	// channel, the stream shows the actor channel's.
	var after uint64
	for what, s := range streams {
		ev := take(t, what, s, 1)[0]
		if ev.Name == "reset" || ev.ID <= before || !strings.Contains(ev.Data, `"after":2`) || after != 0 && ev.ID != after {
			t.Fatalf("%s: after the failover, event %q %d (before it %d, on the other node %d): %s", what, ev.Name, ev.ID, before, after, ev.Data)
		}
		after = ev.ID
	}
	// A resume from before the failover, on each node, once it knows the
	// new host: a stream opened before its registry learned of the
	// take-over is refused (503, the former host does not answer).
	for _, r := range []*relaytest.Relay{n1, n3} {
		waitFor(t, 30*time.Second, r.Cluster().Name()+" to know west's new host", func() bool {
			for _, h := range r.Registry().Snapshot() {
				if h.ClientID == "west" && h.Node != "n2" && h.Live {
					return true
				}
			}
			return false
		})
	}
	for what, r := range map[string]*relaytest.Relay{"n1": n1, "n3": n3} {
		s := sseStream(t, ctx, r, path, r.AdminKey, strconv.FormatUint(before, 10))
		evs := take(t, what+" resumed", s, 2)
		if evs[0].Name != "connected" || evs[1].Name == "reset" || evs[1].ID != after {
			t.Fatalf("%s: resume from %d: %+v", what, before, evs)
		}
	}
}

// TestPausedHostIsFencedOff checks that a host that stops renewing its
// lease (a paused process) loses the world to a follower, that a write
// it then attempts on its own engine is refused and never reaches the
// world, and that it gives the world up and follows it: a write through
// it reaches the new host.
func TestPausedHostIsFencedOff(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	ctx := context.Background()
	writeFirst(t, client, n1, cfgs)
	eng, err := n2.Worlds().World(ctx, "west")
	if err != nil {
		t.Fatal(err)
	}
	n2.Registry().HoldRenewals()
	waitFor(t, 45*time.Second, "another node serving west", func() bool {
		for _, h := range n1.Registry().Snapshot() {
			if h.ClientID == "west" && h.Node != "n2" && h.Live {
				return true
			}
		}
		return false
	})
	_, err = eng.Update(ctx, nil, relaytest.AriaUUID, world.Document{"flags": map[string]any{"test": map[string]any{"stale": 1}}})
	if !errors.Is(err, world.ErrUnavailable) {
		t.Fatalf("a write on the replaced host's engine: %v", err)
	}
	// The replaced host follows the world, and a write through it
	// reaches the new host.
	waitCopy(t, cfgs[1], 1)
	waitFor(t, 45*time.Second, "a write through n2", func() bool {
		return flagWrite(client, n2.Base, n2.AdminKey, "viaN2", 3) == http.StatusOK
	})
	var flags map[string]any
	waitFor(t, 45*time.Second, "a read of west", func() bool {
		var st int
		flags, st = ariaFlags(t, n1)
		return st == http.StatusOK
	})
	if _, ok := flags["stale"]; ok || flags["viaN2"] != float64(3) || flags["first"] != float64(1) {
		t.Fatalf("west after the take-over: %v", flags)
	}
}

// TestStreamLeaderFollowsItsHost checks that a world's stream is led by
// its host's NATS server: once the host claimed it, again after the leader
// was moved elsewhere, and on the node that took the world over after its
// host died.
func TestStreamLeaderFollowsItsHost(t *testing.T) {
	nodes, _ := startReplicated(t, nil)
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	// The first write may meet the world's claim under way on a loaded
	// machine: it is retried.
	waitFor(t, 30*time.Second, "a first write", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "first", 1) == http.StatusOK
	})
	server := func(n *relaytest.Relay) string { return n.Cluster().Conn().ConnectedServerName() }
	leader := func(via *relaytest.Relay) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		s, err := via.Cluster().JetStream().Stream(ctx, "RELAY_WORLD_west")
		if err != nil || s.CachedInfo().Cluster == nil {
			return ""
		}
		return s.CachedInfo().Cluster.Leader
	}
	waitFor(t, 45*time.Second, "n2 to lead west's stream", func() bool { return leader(n1) == server(n2) })

	// An operator (or an election) moves the leader to n1: n2 takes it
	// back.
	// The host may move it back before this test sees it on n1, or while
	// the election is under way: the request is made again until n1 is
	// seen leading.
	waitFor(t, 45*time.Second, "the leader to move to n1", func() bool {
		if leader(n1) == server(n1) {
			return true
		}
		req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": server(n1)}})
		if _, err := n1.Cluster().Conn().Request("$JS.API.STREAM.LEADER.STEPDOWN.RELAY_WORLD_west", req, 10*time.Second); err != nil {
			t.Logf("stepdown: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		return leader(n1) == server(n1)
	})
	waitFor(t, 45*time.Second, "n2 to lead west's stream again", func() bool { return leader(n1) == server(n2) })

	// The host dies: the node that takes west over leads its stream.
	n2.Cluster().Crash()
	waitFor(t, 45*time.Second, "a write after the host died", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "after", 1) == http.StatusOK
	})
	var host *relaytest.Relay
	waitFor(t, 45*time.Second, "a new host of west", func() bool {
		for _, n := range []*relaytest.Relay{nodes[0], nodes[2]} {
			if slices.Contains(n.Registry().HostedEmbedded(), "west") {
				host = n
				return true
			}
		}
		return false
	})
	waitFor(t, 45*time.Second, "the new host to lead west's stream", func() bool { return leader(host) == server(host) })
}

// TestHostKeepsItsWorldWhileTheRegistryElects checks that a healthy host
// keeps serving its replicated world, through itself and through another
// node, while the registry's bucket answers no one for longer than the
// lease, as while it elects a new leader after the server that led it
// died (nats-server waits 4 to 9 s): the host's renewals get no answer
// meanwhile, but no follower may take the world over from a host that
// answers, and no call may be refused.
func TestHostKeepsItsWorldWhileTheRegistryElects(t *testing.T) {
	nodes, cfgs := startReplicated(t, nil)
	n2, n3 := nodes[1], nodes[2]
	client := &http.Client{Timeout: 20 * time.Second}
	writeFirst(t, client, n3, cfgs)

	const election = 8 * time.Second
	for _, n := range nodes {
		n.Registry().StallBucket(election)
	}
	stalled := time.Now()
	// Writes through the host and through n3 while the registry answers
	// no one, and a moment after: every one is acknowledged.
	for i := 0; time.Since(stalled) < election+2*time.Second; i++ {
		for _, via := range []*relaytest.Relay{n2, n3} {
			began := time.Now()
			if st := flagWrite(client, via.Base, via.AdminKey, fmt.Sprintf("during%d", i), i); st != http.StatusOK {
				t.Fatalf("write %d through %s, %v into the registry's election: %d", i, via.Cluster().Name(), began.Sub(stalled).Round(time.Millisecond), st)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, n := range []*relaytest.Relay{nodes[0], n3} {
		if got := n.Registry().HostedEmbedded(); slices.Contains(got, "west") {
			t.Fatalf("%s took west over from its live host", n.Cluster().Name())
		}
	}
	if got := n2.Registry().HostedEmbedded(); !slices.Contains(got, "west") {
		t.Fatalf("n2 hosts %v after the registry's election, want west", got)
	}
}
