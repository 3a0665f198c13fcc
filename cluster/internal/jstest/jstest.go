// Package jstest starts embedded NATS servers with JetStream for the tests
// of the cluster packages: one server, or several joined in one cluster,
// each on random ports with its store in a temporary directory, all shut
// down when the test ends.
package jstest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/testports"
)

// Cluster is a set of running NATS servers that form one JetStream
// cluster (or a single server).
type Cluster struct {
	t       testing.TB
	Servers []*natsserver.Server
	// routes[i][j] carries the route connections server i opens to
	// server j (none when i == j, or for a single server).
	routes [][]*routeProxy
}

// Start starts n embedded NATS servers with JetStream, joined in one
// cluster when n > 1, and waits until JetStream answers on each of them.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	// A clustered server finishes starting only once it can reach its
	// routes, so every server is told every other's route address before
	// any starts: the addresses (client and route ports alike, so that no
	// server's randomly chosen port takes another's) are drawn first, all
	// at once.
	//
	// Each server reaches each other one through a proxy of its own
	// (see Kill), and advertises a route address where nothing listens:
	// a server that learns of another through a third one would otherwise
	// connect to it directly, past the proxies.
	addrs := freeAddrs(t, 3*n+n*(n-1))
	routeAddr := func(i int) string { return addrs[n+i] }
	advertised := func(i int) string { return addrs[2*n+i] }
	proxyAddrs := addrs[3*n:]
	if n > 1 {
		c.routes = make([][]*routeProxy, n)
		for i := range n {
			c.routes[i] = make([]*routeProxy, n)
			for j := range n {
				if j != i {
					c.routes[i][j] = newRouteProxy(t, proxyAddrs[0], routeAddr(j))
					proxyAddrs = proxyAddrs[1:]
				}
			}
		}
	}
	for i := range n {
		_, clientPort := splitAddr(t, addrs[i])
		opts := &natsserver.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       clientPort,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
		}
		if n > 1 {
			host, port := splitAddr(t, routeAddr(i))
			opts.Cluster = natsserver.ClusterOpts{Name: "relaytest", Host: host, Port: port, Advertise: advertised(i)}
			for j, p := range c.routes[i] {
				if j != i {
					opts.Routes = append(opts.Routes, &url.URL{Scheme: "nats", Host: p.addr()})
				}
			}
		}
		s, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatalf("start NATS server %d: %v", i+1, err)
		}
		go s.Start()
		t.Cleanup(s.Shutdown)
		c.Servers = append(c.Servers, s)
	}
	for i, s := range c.Servers {
		if !s.ReadyForConnections(20 * time.Second) {
			t.Fatalf("NATS server %d did not start", i+1)
		}
	}
	// In a cluster, JetStream is ready once its meta group has a leader
	// and every server knows it; a stream created before then fails.
	for i := range c.Servers {
		js := c.JetStream(i)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := js.AccountInfo(ctx)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("JetStream on server %d is not ready: %v", i+1, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// And every server must be a current peer before streams with a copy
	// on each can be placed: create one until that works.
	if n > 1 {
		js := c.JetStream(0)
		deadline := time.Now().Add(20 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "JSTEST_PROBE", Subjects: []string{"jstest.probe"}, Replicas: n, Storage: jetstream.MemoryStorage})
			if err == nil {
				err = js.DeleteStream(ctx, "JSTEST_PROBE")
			}
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("JetStream cannot place %d copies: %v", n, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Kill stops server i as a killed process or a lost machine stops: its
// route connections are cut first, so the other servers hear nothing from
// it (no leadership handed over, no goodbye) and find out only when it
// stops answering, then it shuts down, which closes its clients'
// connections. A plain Shutdown instead hands the leadership of every
// stream it leads to another server at once.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	for j := range c.routes {
		if j != i {
			c.routes[i][j].cutOff()
			c.routes[j][i].cutOff()
		}
	}
	c.Servers[i].Shutdown()
	c.Servers[i].WaitForShutdown()
}

// freeAddrs reserves n loopback addresses for the servers' client and
// route ports, out of the way of other test runs (testports.Addrs).
func freeAddrs(t testing.TB, n int) []string {
	t.Helper()
	return testports.Addrs(t, n)
}

// splitAddr splits host:port.
func splitAddr(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, p
}

// Conn connects to server i; the connection is closed when the test ends.
func (c *Cluster) Conn(i int) *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(c.Servers[i].ClientURL(), nats.Name(fmt.Sprintf("test-n%d", i+1)))
	if err != nil {
		c.t.Fatalf("connect to NATS server %d: %v", i+1, err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// JetStream returns a JetStream context over a new connection to server i.
func (c *Cluster) JetStream(i int) jetstream.JetStream {
	c.t.Helper()
	js, err := jetstream.New(c.Conn(i))
	if err != nil {
		c.t.Fatalf("JetStream on server %d: %v", i+1, err)
	}
	return js
}

// Replicas is the replication the relay chooses for a cluster of this
// size: three copies, or one per server when there are fewer.
func (c *Cluster) Replicas() int { return min(3, len(c.Servers)) }
