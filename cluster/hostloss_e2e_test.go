package cluster_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestHostLoss kills the host of a world (its NATS server stops at once,
// as a SIGKILL would stop it for the other nodes, and it releases
// nothing) while event streams of the world are open on another node,
// and checks that:
//   - a new event stream of the world, on any other node, by SSE or gRPC,
//     with an API key or a stream ticket, for the key's user or another,
//     is a 503 naming the world within the forward time-out, as a unary
//     call is, while the dead host's lease holds;
//   - once the lease ran out, a stream gets the very answer a unary call
//     gets;
//   - the streams already open keep their connection, and when the host
//     returns they resume with the events written meanwhile (a write the
//     dead host acknowledged but could not publish included): ids
//     following on, no reset;
//   - the killed node stops in a few seconds, though it cannot reach the
//     cluster, and its restart answers at once.
func TestHostLoss(t *testing.T) {
	nodes, cfgs := startCluster(t)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	forwardTimeout := cfgs[0].ForwardTimeout
	const path = "/actor/subscribe?clientId=west"
	update := func(via *relaytest.Relay, name string) relaytest.Response {
		return via.Do(http.MethodPut, "/update", via.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), map[string]any{"data": map[string]any{"name": name}})
	}

	// Streams of west (hosted by n2) open on n1, SSE and gRPC.
	sse := sseStream(t, ctx, n1, path, n1.AdminKey, "")
	grpcEvents := grpcStream(t, ctx, n1, n1.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: "west"})
	for what, s := range map[string]<-chan streamEvent{"SSE": sse, "gRPC": grpcEvents} {
		if ev := take(t, what, s, 1)[0]; ev.Name != "connected" {
			t.Fatalf("%s: first event %s", what, ev.Name)
		}
	}
	if got := update(n3, "Aria before"); got.Status != http.StatusOK {
		t.Fatalf("update: %d %s", got.Status, got.Body)
	}
	before := take(t, "SSE", sse, 1)[0]
	if got := take(t, "gRPC", grpcEvents, 1)[0]; got.ID != before.ID {
		t.Fatalf("gRPC event %d, SSE %d", got.ID, before.ID)
	}
	// A stream ticket, bound to its stream at first use, for later.
	alice, _ := n1.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"events:subscribe"}, ClientIds: []string{"west"}, ScopedUserId: "Alice"})
	tr := n1.Do(http.MethodPost, "/stream-tickets", alice, nil, map[string]any{})
	if tr.Status != http.StatusOK {
		t.Fatalf("stream ticket: %d %s", tr.Status, tr.Body)
	}
	ticket := tr.Data(t)["ticket"].(string)
	// Used once on n3 while the host lives, so that n3's copy of the
	// tickets bucket has it when n2 dies (a read right after the write
	// may find a replica that is behind).
	waitUntil(t, "a stream by ticket on n3", func() bool {
		tctx, tcancel := context.WithCancel(ctx)
		defer tcancel()
		req, _ := http.NewRequestWithContext(tctx, http.MethodGet, n3.Base+path+"&ticket="+url.QueryEscape(ticket), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	// A registry whose watcher stopped for good (its consumer lost with a
	// node) finds out at the first recheck of a live host's lease, and
	// follows the registry with a new watcher.
	westLive := func() bool {
		for _, h := range n3.Registry().Snapshot() {
			if h.ClientID == "west" && h.Node == "n2" {
				return h.Live
			}
		}
		return false
	}
	n3.Registry().StallWatch()
	waitUntil(t, "west's lease to look lapsed to n3, whose watcher stopped", func() bool { return !westLive() })
	if got := n3.Do(http.MethodGet, "/get", n3.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil); got.Status != http.StatusOK {
		t.Fatalf("west through n3 with its registry's watcher stopped: %d %s", got.Status, got.Body)
	}
	// The new watcher delivers n2's renewals again: west stays live.
	time.Sleep(clusterLease + time.Second)
	if !westLive() || n3.Registry().Rewatches() != 1 {
		t.Fatalf("n3's registry a lease after its watcher stopped: west live %v, watcher replaced %d times", westLive(), n3.Registry().Rewatches())
	}

	n2.Cluster().Crash()
	// The dead host still holds its lease for a moment, and serves its own
	// callers until it finds it cannot renew it: a write it acknowledges
	// now reaches its journal but not the cluster.
	lost := update(n2, "Aria while cut off")
	t.Logf("write on the host cut off from the cluster: %d", lost.Status)

	// Every door to a stream of west on the other nodes: a quick 503
	// naming the world.
	type door struct {
		what string
		open func() (int, string)
	}
	sseDoor := func(r *relaytest.Relay, key string, q url.Values) func() (int, string) {
		return func() (int, string) {
			got := r.Do(http.MethodGet, "/actor/subscribe", key, q, nil)
			return got.Status, got.ErrorText(t)
		}
	}
	grpcDoor := func(r *relaytest.Relay, key string, req *relayv1.SubscribeActorsRequest) func() (int, string) {
		return func() (int, string) {
			sctx, scancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "x-api-key", key), 20*time.Second)
			defer scancel()
			stream, err := relayv1.NewEventServiceClient(r.Conn).SubscribeActors(sctx, req)
			if err == nil {
				_, err = stream.Recv()
			}
			if status.Code(err) == codes.Unavailable {
				return http.StatusServiceUnavailable, status.Convert(err).Message()
			}
			return 0, err.Error()
		}
	}
	doors := []door{
		{"SSE on n1", sseDoor(n1, n1.AdminKey, relaytest.Q("clientId", "west"))},
		{"SSE on n3", sseDoor(n3, n3.AdminKey, relaytest.Q("clientId", "west"))},
		{"SSE on n3 for a user", sseDoor(n3, n3.AdminKey, relaytest.Q("clientId", "west", "userId", "Alice"))},
		{"SSE on n3 by ticket", sseDoor(n3, "", relaytest.Q("clientId", "west", "ticket", ticket))},
		{"SSE on n1 with Last-Event-ID", func() (int, string) {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n1.Base+path, nil)
			req.Header.Set("x-api-key", n1.AdminKey)
			req.Header.Set("Last-Event-ID", "1")
			resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
			if err != nil {
				return 0, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode, "west"
		}},
		{"gRPC on n3", grpcDoor(n3, n3.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: "west"})},
		{"gRPC on n1 for a user", grpcDoor(n1, n1.AdminKey, &relayv1.SubscribeActorsRequest{ClientId: "west", UserId: "Alice"})},
	}
	for _, d := range doors {
		began := time.Now()
		code, msg := d.open()
		took := time.Since(began)
		t.Logf("%s with the dead host's lease held: %d %q in %v", d.what, code, msg, took.Round(time.Millisecond))
		// A stream by ticket binds its ticket before it reaches the
		// world, in the tickets bucket: while that bucket elects a new
		// leader (when the dead host led it), the answer is a 503 about
		// the tickets instead.
		named := strings.Contains(msg, "west") || (strings.Contains(d.what, "ticket") && strings.Contains(msg, "Stream tickets cannot be checked"))
		if code != http.StatusServiceUnavailable || !named {
			t.Errorf("%s: %d %q, want 503 naming west", d.what, code, msg)
		}
		if took > forwardTimeout+time.Second {
			t.Errorf("%s: the 503 took %v, more than the forward time-out (%v)", d.what, took, forwardTimeout)
		}
	}

	// Once the lease ran out, a stream gets what a unary call gets.
	var unary relaytest.Response
	waitUntil(t, "the dead host's lease to run out", func() bool {
		unary = n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil)
		return unary.Status == http.StatusServiceUnavailable && strings.Contains(unary.ErrorText(t), "lease")
	})
	// Each node judges the lease on its own clock from when it saw it
	// written, so the others follow n1 within a moment.
	for _, d := range doors[:2] {
		var code int
		var msg string
		deadline := time.Now().Add(30 * time.Second)
		for code, msg = d.open(); code != unary.Status || msg != unary.ErrorText(t); code, msg = d.open() {
			if time.Now().After(deadline) {
				t.Errorf("%s after the lease: %d %q; a unary call: %d %q", d.what, code, msg, unary.Status, unary.ErrorText(t))
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// The killed node stops in a moment, though the cluster does not
	// answer it.
	began := time.Now()
	stopAll([]*relaytest.Relay{n2})
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the cut-off node took %v to stop", took)
	} else {
		t.Logf("the cut-off node stopped in %v", took.Round(time.Millisecond))
	}

	// The host returns: the open streams resume with what was written
	// meanwhile, in order and without a reset.
	began = time.Now()
	back := clusterNode(t, cfgs[1], false)
	shareAdminKey(n1, back)
	t.Logf("n2 back in %v", time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() { stopAll([]*relaytest.Relay{n1, back, n3}) })
	waitUntil(t, "west served again", func() bool {
		return n1.Do(http.MethodGet, "/get", n1.AdminKey, relaytest.Q("clientId", "west", "uuid", relaytest.AriaUUID), nil).Status == http.StatusOK
	})
	if got := update(n3, "Aria after"); got.Status != http.StatusOK {
		t.Fatalf("update after the host returned: %d %s", got.Status, got.Body)
	}
	want := 1
	if lost.Status == http.StatusOK {
		want = 2 // the write the host acknowledged while cut off
	}
	for what, s := range map[string]<-chan streamEvent{"SSE": sse, "gRPC": grpcEvents} {
		// The stream carries one channel of the world's events, whose ids
		// are the world's: they increase, and skip the other channels'.
		evs := take(t, what+" after the host returned", s, want)
		last := before.ID
		for i, ev := range evs {
			if ev.Name == "reset" || ev.Name == "overflow" || ev.ID <= last {
				t.Fatalf("%s: event %d after the host returned is %d %s, after %d: %v", what, i, ev.ID, ev.Name, last, evs)
			}
			last = ev.ID
		}
		if !strings.Contains(evs[len(evs)-1].Data, "Aria after") || (want == 2 && !strings.Contains(evs[0].Data, "Aria while cut off")) {
			t.Fatalf("%s: events after the host returned: %v", what, evs)
		}
	}
	// And a new stream opens again on another node.
	take(t, "new stream", sseStream(t, ctx, n3, path, n3.AdminKey, ""), 1)
}
