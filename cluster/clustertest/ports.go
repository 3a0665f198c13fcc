// Package clustertest helps tests start clusters of relay nodes in one
// process: free route ports and node configurations that find each other.
package clustertest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster"
)

// Route ports are taken from below the kernel's ephemeral range (32768
// and up on Linux), so that no outgoing connection of this or another
// process can be handed one of them between the moment a test picks it
// and the moment its NATS server listens on it.
const (
	portsFrom = 20000
	portsTo   = 32000
)

// FreeAddrs returns n loopback host:port addresses for the embedded NATS
// servers' route ports (which must be known to every node before any
// starts). Each port is reserved for the test's life with a lock that
// every test process honours (see reservePort), so two test runs at once
// never pick the same port, and it was free when picked.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	dir := filepath.Join(os.TempDir(), "relay-test-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		t.Fatalf("reserve ports: %v", err)
	}
	var out []string
	port := portsFrom + rand.IntN(portsTo-portsFrom)
	for tries := 0; len(out) < n; tries++ {
		if tries == portsTo-portsFrom {
			t.Fatalf("reserve ports: no free port between %d and %d", portsFrom, portsTo)
		}
		port++
		if port >= portsTo {
			port = portsFrom
		}
		release, ok := reservePort(dir, port)
		if !ok {
			continue
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			release()
			continue
		}
		ln.Close()
		t.Cleanup(release)
		out = append(out, addr)
	}
	return out
}

// Configs returns the cluster configurations of n embedded nodes named
// n1, n2, ... that route to each other, each with a data directory of its
// own under t.TempDir(), a short lease (lease) and a forward time-out of
// two seconds, so that tests of lost hosts run fast. They allow a minute
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
			ForwardTimeout: 2 * time.Second,
			StartTimeout:   cluster.DefaultStartTimeout,
		}
	}
	return out
}
