package shared_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
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

// TestRelaysShareKeysTicketsAndLimits starts two real relay nodes on a
// three-server NATS cluster and speaks to them over REST as clients do: the
// first node bootstraps the cluster's admin key and the second does not; a
// key created on one node works on the other at once, and is refused there
// within a second of its revocation on the first; a stream ticket asked
// for on one node opens its event stream on the other; and each node
// enforces its share of the per-key rate limit.
func TestRelaysShareKeysTicketsAndLimits(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	start := func(i int, name string) *relaytest.Relay {
		return relaytest.Start(t, func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: name}
			cfg.RateLimit, cfg.RateLimitBurst = 600, 600
		})
	}
	a := start(0, "a")
	b := start(1, "b")
	if a.AdminKey == "" || b.AdminKey != "" {
		t.Fatalf("admin keys: node a %q, node b %q; want one, made by the first node", a.AdminKey, b.AdminKey)
	}
	b.AdminKey = a.AdminKey

	// Created on b (over gRPC), used on a (over REST) at once.
	key, id := b.NewKey(&relayv1.CreateKeyRequest{Name: "bot", Scopes: []string{"entity:read", "events:subscribe"}})
	get := relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID)
	if resp := a.Do("GET", "/get", key, get, nil); resp.Status != http.StatusOK {
		t.Fatalf("node a with a key created on node b: %d %s", resp.Status, resp.Body)
	}

	// A ticket asked for on a opens its stream on b.
	ticket := a.Do("POST", "/stream-tickets", key, nil, map[string]any{}).Data(t)["ticket"].(string)
	if first := firstEvent(t, b, "/actor/subscribe?"+url.Values{"clientId": {"demo"}, "actorUuid": {relaytest.AriaUUID}, "ticket": {ticket}}.Encode()); first != "connected" {
		t.Fatalf("stream on node b with a ticket from node a: first event %q, want connected", first)
	}

	// The per-key limit, shared: with two live nodes each allows half of
	// the burst.
	limited, _ := b.NewKey(&relayv1.CreateKeyRequest{Name: "limited", Scopes: []string{"entity:read"}})
	deadline := time.Now().Add(10 * time.Second)
	for a.Shared().Presence.Count() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("node a counts %d live nodes, want 2", a.Shared().Presence.Count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	allowed := 0
	began := time.Now()
	for range 1000 {
		if resp := a.Do("GET", "/get", limited, get, nil); resp.Status == http.StatusOK {
			allowed++
		} else if resp.Status == http.StatusTooManyRequests {
			break
		} else {
			t.Fatalf("unexpected answer %d %s", resp.Status, resp.Body)
		}
	}
	// 300 is the share; the bucket refills meanwhile by 10 tokens a
	// second (600 a minute), 5 requests at two tokens each.
	if most := 300 + 5*int(time.Since(began).Seconds()+1); allowed < 300 || allowed > most {
		t.Fatalf("node a allowed %d requests of a burst of 600 shared by two nodes, want 300 to %d", allowed, most)
	}

	// Revoked on a (REST): refused on b within a second.
	if resp := a.Do("DELETE", "/keys/"+id, a.AdminKey, nil, nil); resp.Status != http.StatusOK {
		t.Fatalf("revoke on node a: %d %s", resp.Status, resp.Body)
	}
	revoked := time.Now()
	for {
		resp := b.Do("GET", "/get", key, get, nil)
		if resp.Status == http.StatusUnauthorized {
			t.Logf("a key revoked on node a was refused by node b after %v", time.Since(revoked))
			break
		}
		if time.Since(revoked) > time.Second {
			t.Fatalf("node b still answers %d a second after the revocation on node a", resp.Status)
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Every door of node b: gRPC, an event stream, the ticket asked for
	// before the revocation.
	md := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	if _, err := relayv1.NewDocumentServiceClient(b.Conn).GetDocument(md, &relayv1.GetDocumentRequest{ClientId: "demo", Uuid: relaytest.AriaUUID}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC on node b with the revoked key: %v, want Unauthenticated", err)
	}
	for _, path := range []string{
		"/actor/subscribe?clientId=demo",
		"/actor/subscribe?" + url.Values{"clientId": {"demo"}, "actorUuid": {relaytest.AriaUUID}, "ticket": {ticket}}.Encode(),
	} {
		req, _ := http.NewRequest("GET", b.Base+path, nil)
		if !strings.Contains(path, "ticket=") {
			req.Header.Set("x-api-key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("stream %s on node b with the revoked key: %d, want 401", path, resp.StatusCode)
		}
	}
}

// firstEvent opens an event stream on r and returns the name of its first
// event.
func firstEvent(t *testing.T, r *relaytest.Relay, path string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", r.Base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream %s: %d", path, resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if name, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			return name
		}
	}
	t.Fatalf("stream %s ended without an event: %v", path, sc.Err())
	return ""
}
