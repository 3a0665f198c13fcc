// Package testports hands out loopback ports to the cluster tests that
// need addresses known before their servers start, in a way that holds
// when several test processes run at once.
package testports

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
)

// Route ports are taken from below the kernel's ephemeral range (32768
// and up on Linux), so that no outgoing connection of this or another
// process can be handed one of them between the moment a test picks it
// and the moment its NATS server listens on it.
const (
	portsFrom = 20000
	portsTo   = 32000
)

// Addrs returns n loopback host:port addresses for servers of a test that
// must be known before any starts, such as NATS route ports. Each port is
// reserved for the test's life with a lock that every test process
// honours (see reservePort), so two test runs at once never pick the same
// port, and it was free when picked.
func Addrs(t testing.TB, n int) []string {
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
