package cluster_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// snapshotEvery is the snapshot interval of these tests, in records.
const snapshotEvery = 10

// withSnapshots makes the nodes snapshot replicated worlds every
// snapshotEvery records.
func withSnapshots(c *node.Config) { c.Cluster.SnapshotRecords = snapshotEvery }

// withByteSnapshots makes the nodes snapshot replicated worlds every
// 64 KiB of records (a few writes), and never by their count.
func withByteSnapshots(c *node.Config) {
	c.Cluster.SnapshotRecords = 1 << 30
	c.Cluster.SnapshotBytes = 64 << 10
}

// restartNode starts a relay again on a node's configuration.
func restartNode(t *testing.T, cfg cluster.Config, admin string, mutate func(*node.Config)) *relaytest.Relay {
	t.Helper()
	r := relaytest.StartLogged(t, testLog(t).With("relay", cfg.NodeName), func(c *node.Config) {
		c.DataDir = cfg.DataDir
		c.Demo = false
		c.Cluster = cfg
		mutate(c)
	})
	r.AdminKey = admin
	return r
}

// worldLog reads the first and last records of west's log through a node.
func worldLog(t *testing.T, via *relaytest.Relay) (first, last uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	first, last, err := via.Cluster().WorldLog(ctx, "west")
	if err != nil {
		t.Logf("west's log: %v", err)
	}
	return first, last
}

// westSnapshots lists the records west's snapshots hold, and fails the
// test if more than two are kept.
func westSnapshots(t *testing.T, via *relaytest.Relay) []uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	seqs, err := via.Cluster().WorldSnapshots(ctx, "west")
	if err != nil {
		t.Logf("west's snapshots: %v", err)
	}
	if len(seqs) > 2 {
		t.Fatalf("%d snapshots of west kept, want at most 2: %v", len(seqs), seqs)
	}
	return seqs
}

// copySeq reads the last record a node's copy of west holds, and whether
// it holds the whole world.
func copySeq(dataDir string) (uint64, bool) {
	seq, _, complete, err := world.ReplicaState(filepath.Join(dataDir, "replicas", "west", "world.db"))
	return seq, err == nil && complete
}

// writeFlags writes n flags named prefix0, prefix1, ... through a node,
// one acknowledged write each, and records them in acked.
func writeFlags(t *testing.T, via *relaytest.Relay, prefix string, n int, acked map[string]int) {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second}
	for i := range n {
		name := fmt.Sprintf("%s%d", prefix, i)
		if st := flagWrite(client, via.Base, via.AdminKey, name, i); st != http.StatusOK {
			t.Fatalf("write %s: %d", name, st)
		}
		acked[name] = i
	}
}

// checkFlags reads west through a node and fails the test if any
// acknowledged write is missing.
func checkFlags(t *testing.T, via *relaytest.Relay, acked map[string]int) {
	t.Helper()
	var flags map[string]any
	waitFor(t, 60*time.Second, "a read of west", func() bool {
		var st int
		flags, st = ariaFlags(t, via)
		return st == http.StatusOK
	})
	for name, v := range acked {
		if got, ok := flags[name]; !ok || got != float64(v) {
			t.Fatalf("acknowledged write %s=%d reads %v", name, v, got)
		}
	}
}

// TestSnapshotsTrimTheWorldLog checks that a follower stores a snapshot
// of a replicated world after the configured number of records, that at
// most two are kept, that the world's log is trimmed below the older one
// (its first record moves up), and that a follower that was down while
// the log was trimmed past its copy recovers from the newest snapshot and
// the log's tail.
func TestSnapshotsTrimTheWorldLog(t *testing.T) {
	nodes, cfgs := startReplicated(t, withSnapshots)
	n1, n3 := nodes[0], nodes[2]
	acked := map[string]int{}
	writeFlags(t, n1, "first", 1, acked)
	for _, i := range []int{0, 2} {
		waitFor(t, 60*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}
	writeFlags(t, n1, "a", 2*snapshotEvery, acked)
	waitFor(t, 60*time.Second, "a snapshot of west and a trimmed log", func() bool {
		seqs := westSnapshots(t, n1)
		first, _ := worldLog(t, n1)
		return len(seqs) > 0 && seqs[0] >= snapshotEvery && first > 1
	})

	// n3 stops; the log moves on and is trimmed past n3's copy.
	stopAll([]*relaytest.Relay{n3})
	behind, _ := copySeq(cfgs[2].DataDir)
	writeFlags(t, n1, "b", 4*snapshotEvery, acked)
	waitFor(t, 60*time.Second, "two snapshots, and the log trimmed past n3's copy", func() bool {
		seqs := westSnapshots(t, n1)
		first, _ := worldLog(t, n1)
		return len(seqs) == 2 && first > behind+1
	})
	// Once the writes stopped and the last snapshot was stored, the log
	// starts right after the older snapshot.
	waitFor(t, 60*time.Second, "the log to start after the older snapshot", func() bool {
		seqs := westSnapshots(t, n1)
		first, _ := worldLog(t, n1)
		return len(seqs) == 2 && first == seqs[0]+1
	})
	first, last := worldLog(t, n1)
	t.Logf("n3's copy at record %d; the log holds %d to %d; snapshots %v", behind, first, last, westSnapshots(t, n1))

	// n3 returns: it restores the newest snapshot and applies the tail.
	n3 = restartNode(t, cfgs[2], n1.AdminKey, withSnapshots)
	nodes[2] = n3
	writeFlags(t, n1, "c", 3, acked)
	waitFor(t, 60*time.Second, "n3's copy to hold the whole log", func() bool {
		seq, complete := copySeq(cfgs[2].DataDir)
		_, last := worldLog(t, n1)
		return complete && seq == last
	})
	if n := n3.Registry().Restores(); n == 0 {
		t.Fatal("n3 caught up without restoring a snapshot")
	}
	checkFlags(t, n3, acked)
}

// TestQuietWorldGetsItsDueSnapshot checks that a snapshot that came due
// while the previous one was still being stored is taken once that one is
// stored, even though no write follows: the records applied meanwhile do
// not wait for the world's next write to be snapshotted, and the log is
// trimmed.
func TestQuietWorldGetsItsDueSnapshot(t *testing.T) {
	nodes, cfgs := startReplicated(t, withSnapshots)
	n1 := nodes[0]
	// Whichever follower takes the snapshots, its first one stays under
	// way until released.
	for _, n := range nodes {
		n.Registry().HoldSnapshots()
	}
	acked := map[string]int{}
	// The world's base and snapshotEvery writes: the first snapshot is due
	// at record snapshotEvery, and is under way once both copies applied
	// the record after it.
	writeFlags(t, n1, "a", snapshotEvery, acked)
	for _, i := range []int{0, 2} {
		waitFor(t, 60*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", snapshotEvery) })
	}
	// Another snapshot's worth of records, applied while the first one is
	// being stored; then the world falls quiet.
	writeFlags(t, n1, "b", snapshotEvery, acked)
	_, last := worldLog(t, n1)
	for _, i := range []int{0, 2} {
		waitFor(t, 60*time.Second, "the copy of west on "+cfgs[i].NodeName+" at the log's end", func() bool { return copyComplete(cfgs[i].DataDir, "west", last-1) })
	}
	if seqs := westSnapshots(t, n1); len(seqs) != 0 {
		t.Fatalf("snapshots stored while they were held: %v", seqs)
	}
	for _, n := range nodes {
		n.Registry().ReleaseSnapshots()
	}
	waitFor(t, 60*time.Second, "a snapshot of the records applied while the first was stored", func() bool {
		seqs := westSnapshots(t, n1)
		return len(seqs) == 2 && seqs[1] == last
	})
	waitFor(t, 60*time.Second, "the log to start after the older snapshot", func() bool {
		seqs := westSnapshots(t, n1)
		first, _ := worldLog(t, n1)
		return len(seqs) == 2 && first == seqs[0]+1
	})
	checkFlags(t, n1, acked)
}

// TestEmptyNodeCatchesUpAndTakesOver checks that a node restarted with its
// data directory deleted follows the world again from its newest snapshot
// and the log's tail, and takes the world over with every acknowledged
// write once the host stops; and that a host that returns with an
// unreplicated copy of the world (created afresh in an empty data
// directory) never serves it, but sets it aside and follows the
// cluster's world. Here snapshots are taken by bytes of records, not by
// their count.
func TestEmptyNodeCatchesUpAndTakesOver(t *testing.T) {
	nodes, cfgs := startReplicated(t, withByteSnapshots)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	acked := map[string]int{}
	writeFlags(t, n1, "first", 1, acked)
	for _, i := range []int{0, 2} {
		waitFor(t, 60*time.Second, "the copy of west on "+cfgs[i].NodeName, func() bool { return copyComplete(cfgs[i].DataDir, "west", 1) })
	}
	writeFlags(t, n1, "a", 2*snapshotEvery, acked)
	waitFor(t, 60*time.Second, "a snapshot of west and a trimmed log", func() bool {
		first, _ := worldLog(t, n1)
		return len(westSnapshots(t, n1)) > 0 && first > 1
	})

	// n3 loses its data directory.
	stopAll([]*relaytest.Relay{n3})
	emptyDir(t, cfgs[2].DataDir)
	writeFlags(t, n1, "b", 5, acked)
	n3 = restartNode(t, cfgs[2], n1.AdminKey, withByteSnapshots)
	nodes[2] = n3
	writeFlags(t, n3, "c", 5, acked)
	waitFor(t, 60*time.Second, "n3's copy to hold the whole log", func() bool {
		seq, complete := copySeq(cfgs[2].DataDir)
		_, last := worldLog(t, n1)
		return complete && seq == last
	})
	if n := n3.Registry().Restores(); n == 0 {
		t.Fatal("n3 caught up without restoring a snapshot")
	}

	// The host stops; n3 (n1 is held back) takes the world over.
	n1.Registry().HoldTakeOvers()
	stopAll([]*relaytest.Relay{n2})
	waitFor(t, 60*time.Second, "n3 serving west", func() bool {
		for _, h := range n1.Registry().Snapshot() {
			if h.ClientID == "west" && h.Node == "n3" && h.Live {
				return true
			}
		}
		return false
	})
	// n3 holds the lease once it claimed west, a moment before it serves
	// it: its fence record waits for west's log to elect a new leader
	// (the stopped host led it), and calls meanwhile answer 503.
	client := &http.Client{Timeout: 20 * time.Second}
	waitFor(t, 60*time.Second, "a write through n1 once n3 serves west", func() bool {
		st := flagWrite(client, n1.Base, n1.AdminKey, "taken", 1)
		if st != http.StatusOK && st != http.StatusServiceUnavailable {
			t.Fatalf("write through n1 after the take-over: %d", st)
		}
		return st == http.StatusOK
	})
	acked["taken"] = 1
	writeFlags(t, n1, "d", 3, acked)
	checkFlags(t, n1, acked)
	checkFlags(t, n3, acked)

	// n2 returns with an empty data directory in which a world west was
	// created afresh: it must follow the cluster's west, not serve its own.
	emptyDir(t, cfgs[1].DataDir)
	seedWorld(t, cfgs[1].DataDir, "west")
	n2 = restartNode(t, cfgs[1], n1.AdminKey, withByteSnapshots)
	nodes[1] = n2
	waitFor(t, 60*time.Second, "n2's copy to hold the whole log", func() bool {
		seq, complete := copySeq(cfgs[1].DataDir)
		_, last := worldLog(t, n1)
		return complete && seq == last
	})
	checkFlags(t, n2, acked)
	for _, h := range n1.Registry().Snapshot() {
		if h.ClientID == "west" && h.Node != "n3" {
			t.Fatalf("west moved to %s", h.Node)
		}
	}
	aside, _ := filepath.Glob(filepath.Join(cfgs[1].DataDir, "set-aside", "west-*", "world.db"))
	if len(aside) != 1 {
		t.Fatalf("the fresh west of n2 was not set aside: %v", aside)
	}
}

// emptyDir deletes everything in a data directory.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}
