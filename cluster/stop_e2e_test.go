package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestNodeStops stops a node of a three-node cluster that has event
// streams open (SSE and gRPC, of its own world and of another node's, by
// key and by stream ticket, and of a linked world connected to it; a
// linked world's stream used to hold the stop up until its time-out),
// and checks that the stop takes a moment:
// with the cluster healthy (its streams end, and the other nodes answer
// 503 for its world at once), and with the two other nodes dead, when
// nothing the node asks of the cluster is answered (this used to take
// 16 to 26 s: each courtesy of the stop waited for its NATS time-out).
func TestNodeStops(t *testing.T) {
	nodes, cfgs := startCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// openStreams opens streams on r and returns them once connected.
	openStreams := func(r *relaytest.Relay) []<-chan streamEvent {
		alice, _ := r.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ClientIds: []string{"west"}, ScopedUserId: "Alice"})
		tr := r.Do(http.MethodPost, "/stream-tickets", alice, nil, map[string]any{})
		if tr.Status != http.StatusOK {
			t.Fatalf("stream ticket: %d %s", tr.Status, tr.Body)
		}
		// A node that has just started may answer a stream with a 503
		// (try again) for a moment on a loaded machine, while it learns
		// the cluster's worlds: the streams open once it serves them.
		ticketPath := "/actor/subscribe?clientId=west&ticket=" + tr.Data(t)["ticket"].(string)
		for _, p := range []struct{ path, key string }{{"/hooks/subscribe?clientId=west", r.AdminKey}, {"/actor/subscribe?clientId=demo", r.AdminKey}, {"/actor/subscribe?clientId=west", r.AdminKey}} {
			waitUntil(t, "a stream of "+p.path, func() bool { return streamStatus(ctx, r, p.path, p.key) == http.StatusOK })
		}
		streams := []<-chan streamEvent{
			sseStream(t, ctx, r, "/hooks/subscribe?clientId=west", r.AdminKey, ""),
			grpcStream(t, ctx, r, r.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: "west"}),
			sseStream(t, ctx, r, "/actor/subscribe?clientId=demo", r.AdminKey, ""),
			sseStream(t, ctx, r, ticketPath, "", ""),
		}
		for _, s := range streams {
			take(t, "connected", s, 1)
		}
		return streams
	}
	restart := func() *relaytest.Relay {
		r := clusterNode(t, cfgs[1], false)
		shareAdminKey(n1, r)
		waitUntil(t, "west served again", func() bool {
			return n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil).Status == http.StatusOK
		})
		return r
	}

	streams := openStreams(n2)
	// And a stream of a linked world whose tabletop is connected to n2.
	_, clientID := connectLinked(t, n2, "fp-stop", nil)
	lpath := "/actor/subscribe?clientId=" + clientID + "&userId=Gamemaster"
	// The node claims the linked world in the background once its tabletop
	// connected: its streams answer 503 until then.
	waitUntil(t, "the linked world's stream", func() bool { return streamStatus(ctx, n2, lpath, n2.AdminKey) == http.StatusOK })
	linked := sseStream(t, ctx, n2, lpath, n2.AdminKey, "")
	take(t, "linked world's stream", linked, 1)
	streams = append(streams, linked)
	began := time.Now()
	stopAll([]*relaytest.Relay{n2})
	took := time.Since(began)
	t.Logf("stopped with the cluster healthy in %v", took.Round(time.Millisecond))
	// A stop takes a moment; the bound leaves room for a loaded machine
	// and stays far below the time-outs a stop used to wait out.
	if took > 8*time.Second {
		t.Errorf("a node of a healthy cluster took %v to stop", took)
	}
	// The other nodes learn of the release through their watchers, a
	// moment later on a loaded machine; until then they see a lease that
	// is no longer renewed, or, while that lease still runs, a host that
	// takes no calls. Either way the answer is a 503 at once. A stop
	// gives its releases a second: on a loaded machine one may not be
	// written in time, and the lease then runs out on its own, as when
	// the cluster has no quorum.
	var got relaytest.Response
	deadline := time.Now().Add(30 * time.Second)
	for {
		got = n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		msg := got.ErrorText(t)
		if got.Status != http.StatusServiceUnavailable || !strings.Contains(msg, "n2 stopped") && !strings.Contains(msg, "n2 does not answer") {
			t.Fatalf("the stopped node's world: %d %s", got.Status, got.Body)
		}
		if strings.Contains(msg, "n2 stopped hosting it") || strings.Contains(msg, "n2 stopped renewing its lease") {
			t.Logf("n1 about the stopped node's world: %s", msg)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("n1 still takes n2 for west's host 30 s after n2 stopped: %s", msg)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Every stream the stopped node served has ended.
	for i, s := range streams {
		timeout := time.After(30 * time.Second)
	drain:
		for {
			select {
			case _, open := <-s:
				if !open {
					break drain
				}
			case <-timeout:
				t.Fatalf("stream %d of the stopped node still open after 30 s", i)
			}
		}
	}

	n2 = restart()
	t.Cleanup(func() { stopAll([]*relaytest.Relay{n1, n2, n3}) })
	openStreams(n2)
	// The two other nodes die: the node's cluster has no quorum, and
	// answers none of its releases, renewals and deletions.
	n1.Cluster().Crash()
	n3.Cluster().Crash()
	began = time.Now()
	stopAll([]*relaytest.Relay{n2})
	took = time.Since(began)
	t.Logf("stopped without a quorum in %v", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Errorf("a node whose cluster lost its quorum took %v to stop", took)
	}
}

// streamStatus opens an SSE stream of r and closes it at once, and returns
// its status (0 when r could not be reached).
func streamStatus(ctx context.Context, r *relaytest.Relay, path, key string) int {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Base+path, nil)
	if err != nil {
		return 0
	}
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestStoppingHostFinishesItsWrites stops (gracefully) the host of a
// replicated world while writers update it through the host itself and
// through another node, and checks that the writes under way are not
// refused because a follower took the world over: each is acknowledged,
// or answered with a 503 that says what became of it, and every
// acknowledged write is in the world once a follower serves it.
func TestStoppingHostFinishesItsWrites(t *testing.T) {
	// The follower takes west over when the host releases it, not when
	// its lease runs out: a lease longer than the other tests' keeps a
	// loaded machine's slow renewals from failing writes for a reason
	// other than the stop.
	nodes, _ := startReplicated(t, func(c *node.Config) { c.Cluster.LeaseTTL = 10 * time.Second })
	n1, n2 := nodes[0], nodes[1]
	client := &http.Client{Timeout: 20 * time.Second}
	// The first write may meet the world's claim under way on a loaded
	// machine: it is retried.
	waitFor(t, 30*time.Second, "a first write", func() bool {
		return flagWrite(client, n1.Base, n1.AdminKey, "first", 1) == http.StatusOK
	})

	var mu sync.Mutex
	acked := map[string]int{}
	answers := map[string]int{} // 503 messages, and how often
	var okCount atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 8 {
		via := []*relaytest.Relay{n1, n2}[w%2]
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d_%d", w, i)
				st, msg := flagWriteAnswer(client, via.Base, via.AdminKey, name, i)
				mu.Lock()
				switch st {
				case http.StatusOK:
					acked[name] = i
					okCount.Add(1)
				case http.StatusServiceUnavailable:
					answers[msg]++
				}
				mu.Unlock()
				if st != http.StatusOK {
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
	waitFor(t, 60*time.Second, "writes before the stop", func() bool { return okCount.Load() >= 40 })
	stopAll([]*relaytest.Relay{n2})
	// Writes succeed again through n1 once a follower took west over.
	after := okCount.Load()
	waitFor(t, 60*time.Second, "writes after the stop", func() bool { return okCount.Load() > after+10 })
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d writes acknowledged; 503 answers: %v", len(acked), answers)
	for msg := range answers {
		// Each 503 says that the call was not carried out (the node was
		// stopping, or no node served the world for a moment); none is
		// a write refused half-way.
		if strings.Contains(msg, "Could not save changes") || strings.Contains(msg, "unknown") || strings.Contains(msg, "no longer hosts it") {
			t.Errorf("a write under way on the stopping host was refused: %q", msg)
		}
	}
	var flags map[string]any
	waitFor(t, 30*time.Second, "a read of west", func() bool {
		var st int
		flags, st = ariaFlags(t, n1)
		return st == http.StatusOK
	})
	lost := 0
	for k, v := range acked {
		if got, ok := flags[k]; !ok || got != float64(v) {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged writes lost", lost, len(acked))
	}
}

// flagWriteAnswer is flagWrite that also returns the error's message.
func flagWriteAnswer(client *http.Client, base, key, name string, value int) (int, string) {
	body, _ := json.Marshal(map[string]any{"data": map[string]any{"flags": map[string]any{"test": map[string]any{name: value}}}})
	req, err := http.NewRequest(http.MethodPut, base+"/update?clientId=west&uuid="+relaytest.AriaUUID, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var env struct {
		Error string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&env)
	return resp.StatusCode, env.Error
}
