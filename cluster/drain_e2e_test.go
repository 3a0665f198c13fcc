package cluster_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

func TestMain(m *testing.M) { relaytest.Main(m) }

// TestForwardedCallsFinishOnStop stops a host while a call another node
// forwarded to it is running, and expects the call's answer: the host
// stops taking forwarded calls, waits for those under way, and only then
// closes what they need and leaves NATS. A call sent to it afterwards is a
// 503 at once.
func TestForwardedCallsFinishOnStop(t *testing.T) {
	t.Parallel()
	nodes, _ := startCluster(t)
	n1, n2 := nodes[0], nodes[1]
	// A script that runs for a second and a half on west's host, n2.
	slow := map[string]any{"script": "const start = Date.now(); while (Date.now() - start < 1500) {} return 7;"}
	answered := make(chan relaytest.Response, 1)
	go func() {
		answered <- n1.Do(http.MethodPost, "/execute-js", n1.AdminKey, relaytest.Q("clientId", "west"), slow)
	}()
	// Let the call reach n2 and its script start.
	time.Sleep(500 * time.Millisecond)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n2.Conn.Close()
		_ = n2.Close(ctx)
	}()
	select {
	case got := <-answered:
		if got.Status != http.StatusOK || got.Data(t)["result"] != float64(7) {
			t.Fatalf("the forwarded call under way when its host stopped: %d %s", got.Status, got.Body)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("no answer to the forwarded call within 8 s")
	}
	<-stopped
	start := time.Now()
	got := n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
	if got.Status != http.StatusServiceUnavailable || time.Since(start) > 3*time.Second {
		t.Fatalf("a call for the stopped host's world: %d after %v: %s", got.Status, time.Since(start), got.Body)
	}
}
