// Package jstest starts embedded NATS servers with JetStream for the tests
// of the cluster packages: one server, or several joined in one cluster,
// each on random ports with its store in a temporary directory, all shut
// down when the test ends.
package jstest

import (
	"context"
	"fmt"
	"net/url"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a set of running NATS servers that form one JetStream
// cluster (or a single server).
type Cluster struct {
	t       testing.TB
	Servers []*natsserver.Server
}

// Start starts n embedded NATS servers with JetStream, joined in one
// cluster when n > 1, and waits until JetStream answers on each of them.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t}
	var seed *url.URL
	for i := range n {
		opts := &natsserver.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       -1,
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoSigs:     true,
			NoLog:      true,
		}
		if n > 1 {
			opts.Cluster = natsserver.ClusterOpts{Name: "relaytest", Host: "127.0.0.1", Port: -1}
			if seed != nil {
				opts.Routes = []*url.URL{seed}
			}
		}
		s, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatalf("start NATS server %d: %v", i+1, err)
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("NATS server %d did not start", i+1)
		}
		t.Cleanup(s.Shutdown)
		if n > 1 && seed == nil {
			seed = &url.URL{Scheme: "nats", Host: s.ClusterAddr().String()}
		}
		c.Servers = append(c.Servers, s)
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
	return c
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
