package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
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
	// The forward time-out and the script's time limit are long enough
	// for the script to finish on a loaded machine: the test is about the
	// stop waiting for the call, not about time-outs.
	nodes, _ := startCluster(t, steadyLease, func(c *node.Config) {
		c.Cluster.ForwardTimeout = 30 * time.Second
		c.ScriptTimeout = 30 * time.Second
	})
	n1, n2 := nodes[0], nodes[1]
	// A script that runs for a second and a half on west's host, n2.
	slow := map[string]any{"script": "const start = Date.now(); while (Date.now() - start < 1500) {} return 7;"}
	// The call's own client waits as long as the forward: the test
	// client's usual ten seconds may pass on a loaded machine before a
	// stopping host's answer comes back.
	type answer struct {
		status int
		body   map[string]any
		err    error
	}
	answered := make(chan answer, 1)
	began := time.Now()
	go func() {
		body, _ := json.Marshal(slow)
		req, _ := http.NewRequest(http.MethodPost, n1.Base+"/execute-js?clientId=west", bytes.NewReader(body))
		req.Header.Set("x-api-key", n1.AdminKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		var env map[string]any
		err = json.NewDecoder(resp.Body).Decode(&env)
		answered <- answer{status: resp.StatusCode, body: env, err: err}
	}()
	// The stop begins once the script runs on n2.
	waitUntil(t, "the script to run on its host", func() bool { return n2.Scripts().Stats().Running > 0 })
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = n2.Conn.Close()
		_ = n2.Close(ctx)
	}()
	select {
	case got := <-answered:
		data, _ := got.body["data"].(map[string]any)
		if got.err != nil || got.status != http.StatusOK || data["result"] != float64(7) {
			t.Fatalf("the forwarded call under way when its host stopped: %d %v %v", got.status, got.body, got.err)
		}
		t.Logf("the forwarded call answered %v after it was sent", time.Since(began).Round(time.Millisecond))
	case <-time.After(time.Minute):
		t.Fatal("no answer to the forwarded call within a minute")
	}
	<-stopped
	start := time.Now()
	got := n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
	if got.Status != http.StatusServiceUnavailable || time.Since(start) > 10*time.Second {
		t.Fatalf("a call for the stopped host's world: %d after %v: %s", got.Status, time.Since(start), got.Body)
	}
}
