// Package clustertest helps tests start clusters of relay nodes in one
// process: free route ports and node configurations that find each other.
package clustertest

import (
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/internal/testports"
)

// FreeAddrs returns n loopback host:port addresses for the embedded NATS
// servers' route ports (which must be known to every node before any
// starts), each reserved for the test's life so that two test runs at
// once never pick the same one (see testports.Addrs).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	return testports.Addrs(t, n)
}

// Configs returns the cluster configurations of n embedded nodes named
// n1, n2, ... that route to each other, each with a data directory of its
// own under t.TempDir(), a short lease (lease) and a forward time-out of
// ten seconds: short enough for tests of lost hosts, long enough that a
// loaded machine running the race detector answers every live call. They allow a minute
// to start, as a relay does: a loaded machine may take that long to
// start three NATS servers with the race detector.
func Configs(t testing.TB, n int, lease time.Duration) []cluster.Config {
	t.Helper()
	addrs := FreeAddrs(t, n)
	out := make([]cluster.Config, n)
	for i := range n {
		out[i] = cluster.Config{
			NodeName:       "n" + string(rune('1'+i)),
			DataDir:        t.TempDir(),
			ClusterListen:  addrs[i],
			ClusterPeers:   addrs,
			LeaseTTL:       lease,
			ForwardTimeout: 10 * time.Second,
			StartTimeout:   cluster.DefaultStartTimeout,
		}
	}
	return out
}
