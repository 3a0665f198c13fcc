// Package clustertest helps tests start clusters of relay nodes in one
// process: free route ports and node configurations that find each other.
package clustertest

import (
	"net"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
)

// FreeAddrs returns n loopback host:port addresses that were free a moment
// ago, for the embedded NATS servers' route ports (which must be known to
// every node before any starts).
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	var lns []net.Listener
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("find a free port: %v", err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// Configs returns the cluster configurations of n embedded nodes named
// n1, n2, ... that route to each other, each with a data directory of its
// own under t.TempDir(), a short lease (lease) and a forward time-out of
// two seconds, so that tests of lost hosts run fast.
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
			ForwardTimeout: 2 * time.Second,
			StartTimeout:   30 * time.Second,
		}
	}
	return out
}
