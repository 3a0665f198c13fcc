package shared_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestSuspensionReachesEveryNode starts two real relay nodes sharing one
// JetStream state. An account made on node a makes an embedded world on
// node b, which every node then knows as the account's, and holds an SSE
// and a gRPC event stream open on node b. Suspending the account on node a
// refuses its key on node b (REST and gRPC, 403 naming the suspension) and
// ends both streams there within a second; resuming it lets the key in
// again on node b within a second.
func TestSuspensionReachesEveryNode(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	start := func(i int, name string) *relaytest.Relay {
		return relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: name}
		})
	}
	a := start(0, "a")
	b := start(1, "b")
	b.AdminKey = a.AdminKey

	made := a.Do("POST", "/accounts", a.AdminKey, nil, map[string]any{"name": "Roaming"})
	if made.Status != http.StatusOK {
		t.Fatalf("POST /accounts on node a: %d %s", made.Status, made.Body)
	}
	acctID := made.Data(t)["account"].(map[string]any)["id"].(string)
	key := made.Data(t)["key"].(string)
	if r := b.Do("POST", "/worlds", key, nil, map[string]any{"clientId": "roaming-world", "title": "Roaming", "seed": "demo"}); r.Status != http.StatusOK {
		t.Fatalf("POST /worlds on node b: %d %s", r.Status, r.Body)
	}
	// The world's owner is shared: on node a the operator's key sees the
	// account's world as the account's, and another account's key does
	// not reach it on node b.
	other := a.Do("POST", "/accounts", a.AdminKey, nil, map[string]any{"name": "Other"}).Data(t)["key"].(string)
	if r := b.Do("GET", "/get", other, relaytest.Q("clientId", "roaming-world", "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusNotFound {
		t.Fatalf("another account reads the world on node b: %d %s", r.Status, r.Body)
	}

	// Streams held open on node b.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", b.Base+"/hooks/subscribe?clientId=roaming-world", nil)
	req.Header.Set("x-api-key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE stream on node b: %d", resp.StatusCode)
	}
	sseEnded := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		var last string
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				last = sc.Text()
			}
		}
		sseEnded <- last
	}()
	gctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	gs, err := relayv1.NewEventServiceClient(b.Conn).SubscribeHooks(gctx, &relayv1.SubscribeHooksRequest{ClientId: "roaming-world"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gs.Recv(); err != nil {
		t.Fatalf("gRPC stream on node b: %v", err)
	}
	grpcEnded := make(chan error, 1)
	go func() {
		for {
			if _, err := gs.Recv(); err != nil {
				grpcEnded <- err
				return
			}
		}
	}()

	// Suspended on node a.
	if r := a.Do("POST", "/accounts/"+acctID+"/suspend", a.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("suspend on node a: %d %s", r.Status, r.Body)
	}
	suspended := time.Now()
	for {
		r := b.Do("GET", "/clients", key, nil, nil)
		if r.Status == http.StatusForbidden && strings.Contains(r.ErrorText(t), "suspended") {
			t.Logf("node b refused the key %v after the suspension on node a", time.Since(suspended))
			break
		}
		if time.Since(suspended) > time.Second {
			t.Fatalf("node b still answers %d %s a second after the suspension on node a", r.Status, r.Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := relayv1.NewClientServiceClient(b.Conn).ListClients(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), &relayv1.ListClientsRequest{}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "suspended") {
		t.Fatalf("gRPC on node b after the suspension: %v", err)
	}
	select {
	case last := <-sseEnded:
		if !strings.Contains(last, "suspended") {
			t.Logf("the SSE stream ended; its last data: %s", last)
		}
	case <-time.After(time.Until(suspended.Add(time.Second))):
		t.Fatal("the SSE stream on node b was still open a second after the suspension")
	}
	select {
	case err := <-grpcEnded:
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("the gRPC stream on node b ended with %v, want PermissionDenied", err)
		}
	case <-time.After(time.Until(suspended.Add(time.Second))):
		t.Fatal("the gRPC stream on node b was still open a second after the suspension")
	}

	// Resumed on node a: node b lets the key in again.
	if r := a.Do("POST", "/accounts/"+acctID+"/resume", a.AdminKey, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("resume on node a: %d %s", r.Status, r.Body)
	}
	resumed := time.Now()
	for {
		r := b.Do("GET", "/clients", key, nil, nil)
		if r.Status == http.StatusOK {
			break
		}
		if time.Since(resumed) > time.Second {
			t.Fatalf("node b still answers %d %s a second after the resumption on node a", r.Status, r.Body)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
