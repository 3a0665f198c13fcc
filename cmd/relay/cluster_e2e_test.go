package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/cluster/clustertest"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// clusterLease is the world lease of the cluster tests: short, so that a
// lost host shows quickly.
const clusterLease = 1500 * time.Millisecond

// seedWorld creates a world from the demo seed under clientID in dataDir,
// before a relay starts there.
func seedWorld(t *testing.T, dataDir, clientID string) {
	t.Helper()
	host, err := world.OpenHost(dataDir, world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Create(context.Background(), clientID, seed); err != nil {
		t.Fatalf("create world %s: %v", clientID, err)
	}
}

// clusterNode starts one relay of a cluster with its cluster
// configuration and its own data directory.
func clusterNode(t *testing.T, cc cluster.Config, demoWorld bool) *testRelay {
	t.Helper()
	return startTestRelay(t, func(c *serveConfig) {
		c.dataDir = cc.DataDir
		c.demo = demoWorld
		c.cluster = cc
	})
}

// startCluster starts three relays as one cluster: n1 holds the demo
// world, n2 the world "west", and n3 a second world "demo" of its own:
// one of n1 and n3 must refuse to host its demo.
func startCluster(t *testing.T) ([]*testRelay, []cluster.Config) {
	t.Helper()
	cfgs := clustertest.Configs(t, 3, clusterLease)
	seedWorld(t, cfgs[1].DataDir, "west")
	seedWorld(t, cfgs[2].DataDir, "demo")
	nodes := make([]*testRelay, 3)
	// The shared state is kept three ways: the cluster answers once all
	// three are up, so they start together.
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() { nodes[i] = clusterNode(t, cfgs[i], i == 0) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return nodes, cfgs
}

// withoutRequestID drops the envelope's request id, which differs from
// call to call, so that two answers can be compared byte for byte.
func withoutRequestID(t *testing.T, body []byte) []byte {
	t.Helper()
	var v map[string]json.RawMessage
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, body)
	}
	delete(v, "requestId")
	out, _ := json.Marshal(v)
	return out
}

// TestCluster runs three relays in process as one cluster and checks that
// a call for a world is served by its host from any node, that unknown
// worlds are unknown everywhere, that a second node refuses a duplicate
// client id, and that a world whose host stopped is unavailable at once
// and served again when the host returns.
func TestCluster(t *testing.T) {
	nodes, cfgs := startCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]

	t.Run("REST call routed to the host", func(t *testing.T) {
		direct := n2.do(http.MethodGet, "/get", n2.adminKey, q("clientId", "west", "uuid", ariaUUID), nil)
		if direct.status != http.StatusOK {
			t.Fatalf("on the host: %d %s", direct.status, direct.body)
		}
		for _, edge := range []*testRelay{n1, n3} {
			got := edge.do(http.MethodGet, "/get", edge.adminKey, q("clientId", "west", "uuid", ariaUUID), nil)
			if got.status != http.StatusOK {
				t.Fatalf("forwarded: %d %s", got.status, got.body)
			}
			if !bytes.Equal(withoutRequestID(t, got.body), withoutRequestID(t, direct.body)) {
				t.Fatalf("forwarded answer differs from the host's:\n%s\n%s", got.body, direct.body)
			}
			if id := got.json(t)["requestId"]; got.header.Get("x-request-id") != "" && id != got.header.Get("x-request-id") {
				t.Fatalf("request id %v, header %q", id, got.header.Get("x-request-id"))
			}
		}
		// A write on one node is read on another.
		upd := n3.do(http.MethodPut, "/update", n3.adminKey, q("clientId", "west", "uuid", ariaUUID), map[string]any{"data": map[string]any{"name": "Aria of the West"}})
		if upd.status != http.StatusOK {
			t.Fatalf("update through n3: %d %s", upd.status, upd.body)
		}
		got := n2.do(http.MethodGet, "/get", n2.adminKey, q("clientId", "west", "uuid", ariaUUID), nil)
		if !strings.Contains(string(got.body), "Aria of the West") {
			t.Fatalf("the host does not have the write: %s", got.body)
		}
	})

	t.Run("errors of the host come back whole", func(t *testing.T) {
		direct := n2.do(http.MethodGet, "/get", n2.adminKey, q("clientId", "west", "uuid", "Actor.nobodyAtAll00001"), nil)
		got := n1.do(http.MethodGet, "/get", n1.adminKey, q("clientId", "west", "uuid", "Actor.nobodyAtAll00001"), nil)
		if got.status != direct.status || got.status != http.StatusNotFound {
			t.Fatalf("status %d, host %d", got.status, direct.status)
		}
		if !bytes.Equal(withoutRequestID(t, got.body), withoutRequestID(t, direct.body)) {
			t.Fatalf("forwarded error differs:\n%s\n%s", got.body, direct.body)
		}
	})

	t.Run("gRPC call routed to the host", func(t *testing.T) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", n3.adminKey)
		resp, err := relayv1.NewDocumentServiceClient(n3.conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "west", Uuid: ariaUUID})
		if err != nil {
			t.Fatalf("GetDocument through n3: %v", err)
		}
		if !strings.Contains(string(resp.GetDocument()), `"name":"Aria of the West"`) {
			t.Fatalf("unexpected document: %s", resp.GetDocument())
		}
		_, err = relayv1.NewDocumentServiceClient(n3.conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "west", Uuid: "Actor.nobodyAtAll00001"})
		if status.Code(err) != codes.NotFound {
			t.Fatalf("missing document through n3: %v", err)
		}
	})

	t.Run("unknown world is 404 on every node", func(t *testing.T) {
		for i, n := range nodes {
			got := n.do(http.MethodGet, "/get", n.adminKey, q("clientId", "nowhere", "uuid", ariaUUID), nil)
			if got.status != http.StatusNotFound || !strings.Contains(got.errorText(t), "nowhere") {
				t.Fatalf("n%d: %d %s", i+1, got.status, got.body)
			}
		}
	})

	t.Run("duplicate client id refused", func(t *testing.T) {
		// n1 and n3 both have a world demo on disk: one holds it, the
		// other refuses it.
		refusedBy := map[string]bool{}
		for i, n := range []*testRelay{n1, n3} {
			for _, h := range n.registry.Snapshot() {
				if h.ClientID == "demo" && h.Refused {
					refusedBy[[]string{"n1", "n3"}[i]] = true
				}
			}
		}
		if len(refusedBy) != 1 {
			t.Fatalf("refused by %v, want exactly one of n1 and n3", refusedBy)
		}
		// Every node reaches the holder's copy: a write through any node
		// is read through every other.
		upd := n2.do(http.MethodPut, "/update", n2.adminKey, q("clientId", "demo", "uuid", bromUUID), map[string]any{"data": map[string]any{"name": "Brom the Only"}})
		if upd.status != http.StatusOK {
			t.Fatalf("update through n2: %d %s", upd.status, upd.body)
		}
		for i, n := range []*testRelay{n1, n3} {
			got := n.do(http.MethodGet, "/get", n.adminKey, q("clientId", "demo", "uuid", bromUUID), nil)
			if got.status != http.StatusOK || !strings.Contains(string(got.body), "Brom the Only") {
				t.Fatalf("demo through %s: %d %s", []string{"n1", "n3"}[i], got.status, got.body)
			}
		}
	})

	t.Run("host stopped, then back", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n2.close(ctx); err != nil {
			t.Fatalf("stop n2: %v", err)
		}
		start := time.Now()
		got := n1.do(http.MethodGet, "/get", n1.adminKey, q("clientId", "west", "uuid", ariaUUID), nil)
		if got.status != http.StatusServiceUnavailable || !strings.Contains(got.errorText(t), "west") {
			t.Fatalf("world of a stopped host: %d %s", got.status, got.body)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("the 503 took %v", d)
		}
		back := clusterNode(t, cfgs[1], false)
		deadline := time.Now().Add(10 * time.Second)
		for {
			got = n1.do(http.MethodGet, "/get", n1.adminKey, q("clientId", "west", "uuid", ariaUUID), nil)
			if got.status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("world west not served again after its host returned: %d %s", got.status, got.body)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(string(got.body), "Aria of the West") {
			t.Fatalf("the returned host lost a write: %s", got.body)
		}
		_ = back
	})
}
