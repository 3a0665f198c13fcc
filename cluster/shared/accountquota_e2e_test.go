package shared_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/signin"
)

// startPair starts two relay nodes, a and b, sharing one JetStream state,
// and waits until each counts the other as live.
func startPair(t *testing.T, mutate ...func(*node.Config)) (a, b *relaytest.Relay) {
	t.Helper()
	c := jstest.Start(t, 3)
	start := func(i int, name string) *relaytest.Relay {
		return relaytest.Start(t, append([]func(*node.Config){func(cfg *node.Config) {
			cfg.Shared = &node.SharedState{JetStream: c.JetStream(i), NodeName: name}
		}}, mutate...)...)
	}
	a = start(0, "a")
	b = start(1, "b")
	b.AdminKey = a.AdminKey
	deadline := time.Now().Add(10 * time.Second)
	for a.Shared().Presence.Count() != 2 || b.Shared().Presence.Count() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("live nodes: a counts %d, b %d; want 2", a.Shared().Presence.Count(), b.Shared().Presence.Count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return a, b
}

// newAccount makes an account with quotas on r and returns its id and
// first admin key.
func newAccount(t *testing.T, r *relaytest.Relay, name string, quotas map[string]any) (id, key string) {
	t.Helper()
	made := r.Do("POST", "/accounts", r.AdminKey, nil, map[string]any{"name": name, "quotas": quotas})
	if made.Status != http.StatusOK {
		t.Fatalf("POST /accounts: %d %s", made.Status, made.Body)
	}
	return made.Data(t)["account"].(map[string]any)["id"].(string), made.Data(t)["key"].(string)
}

// TestAccountRequestQuotaAcrossNodes gives an account a quota of 20
// requests a minute and spreads its calls over two nodes: together they
// allow about 20 (each its share, 10), not 20 each, and a refusal is 429
// naming the quota.
func TestAccountRequestQuotaAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := startPair(t)
	_, key := newAccount(t, a, "Chatty", map[string]any{"requestsPerMinute": 20})
	allowed := 0
	var refusal string
	began := time.Now()
	for i := range 40 {
		node := a
		if i%2 == 1 {
			node = b
		}
		r := node.Do("GET", "/clients", key, nil, nil)
		switch r.Status {
		case http.StatusOK:
			allowed++
		case http.StatusTooManyRequests:
			refusal = r.ErrorText(t)
		default:
			t.Fatalf("GET /clients: %d %s", r.Status, r.Body)
		}
	}
	// Each node's bucket refills by a third of a token a second, half a
	// call at two tokens each.
	slack := int(time.Since(began).Seconds()/3) + 1
	if allowed < 20 || allowed > 20+slack {
		t.Fatalf("two nodes allowed %d of 40 calls of an account with 20 requests a minute, want 20 to %d", allowed, 20+slack)
	}
	if !strings.Contains(refusal, "'requestsPerMinute'") {
		t.Fatalf("refusal %q does not name the quota", refusal)
	}
}

// TestAccountStreamQuotaAcrossNodes gives an account a quota of two open
// event streams and opens one on each of two nodes: a third is refused on
// either node with 403 naming the quota, and once a stream ends on one
// node the other lets a new one open.
func TestAccountStreamQuotaAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := startPair(t)
	id, key := newAccount(t, a, "Watcher", map[string]any{"streams": 2})
	// Each node holds a world of the account (the nodes share the state
	// but do not forward calls here).
	for _, r := range []*relaytest.Relay{a, b} {
		if r := r.Do("POST", "/worlds", key, nil, map[string]any{"clientId": "watched-" + worldSuffix(r, a), "title": "Watched", "seed": "demo"}); r.Status != http.StatusOK {
			t.Fatalf("POST /worlds: %d %s", r.Status, r.Body)
		}
	}
	open := func(r *relaytest.Relay) (context.CancelFunc, *http.Response) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, "GET", r.Base+"/hooks/subscribe?clientId=watched-"+worldSuffix(r, a), nil)
		req.Header.Set("x-api-key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		return func() { cancel(); resp.Body.Close() }, resp
	}
	// openStreams is what node r says the account has open.
	openStreams := func(r *relaytest.Relay) float64 {
		usage, _ := r.Do("GET", "/accounts/"+id, a.AdminKey, nil, nil).Data(t)["account"].(map[string]any)["usage"].(map[string]any)
		n, _ := usage["streams"].(float64)
		return n
	}
	waitFor := func(r *relaytest.Relay, want float64) {
		t.Helper()
		deadline := time.Now().Add(time.Second)
		for openStreams(r) != want {
			if time.Now().After(deadline) {
				t.Fatalf("node %s counts %v open streams of the account a second later, want %v", r.Base, openStreams(r), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	closeA, resp := open(a)
	defer closeA()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream on node a: %d", resp.StatusCode)
	}
	closeB, resp := open(b)
	defer closeB()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second stream on node b: %d", resp.StatusCode)
	}
	waitFor(a, 2)
	waitFor(b, 2)
	for _, r := range []*relaytest.Relay{a, b} {
		closeThird, resp := open(r)
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		closeThird()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body[:n]), "'streams'") {
			t.Fatalf("third stream on node %s: %d %s, want 403 naming the quota 'streams'", r.Base, resp.StatusCode, body[:n])
		}
	}
	// The stream on node b ends: node a lets a new one open.
	closeB()
	waitFor(a, 1)
	closeAgain, resp := open(a)
	defer closeAgain()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a stream on node a after one ended on node b: %d", resp.StatusCode)
	}
}

// worldSuffix tells the world of node r apart: "a" for node a, "b" for
// the other.
func worldSuffix(r, a *relaytest.Relay) string {
	if r == a {
		return "a"
	}
	return "b"
}

// TestSignInLockoutsAcrossNodes: failed sign-ins for one name spread over
// two nodes add up, so that the name is locked on both after
// signin.LockoutFailures in all (even for the right password); and the
// sign-ins of one address spread over both nodes are limited to
// --signin-rate-limit in all, not that many on each.
func TestSignInLockoutsAcrossNodes(t *testing.T) {
	t.Parallel()
	a, b := startPair(t, func(cfg *node.Config) { cfg.SignInRateLimit = 0 })
	const password = "correct horse battery"
	if r := a.Do("POST", "/accounts", a.AdminKey, nil, map[string]any{"name": "Guild", "password": password}); r.Status != http.StatusOK {
		t.Fatalf("POST /accounts: %d %s", r.Status, r.Body)
	}
	signIn := func(r *relaytest.Relay, name, password string) relaytest.Response {
		return r.Do("POST", signin.PathSession, "", nil, map[string]any{"name": name, "password": password})
	}
	for i := range signin.LockoutFailures {
		node := a
		if i%2 == 1 {
			node = b
		}
		if r := signIn(node, "Guild", "a wrong password"); r.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d %s", i, r.Status, r.Body)
		}
	}
	for _, node := range []*relaytest.Relay{a, b} {
		if r := signIn(node, "guild", password); r.Status != http.StatusTooManyRequests || !strings.Contains(r.ErrorText(t), "locked") {
			t.Fatalf("the right password on %s after %d failures spread over two nodes: %d %s, want 429 locked", node.Base, signin.LockoutFailures, r.Status, r.Body)
		}
	}

	// Per address: 4 sign-ins a minute in all.
	a, b = startPair(t, func(cfg *node.Config) { cfg.SignInRateLimit = 4 })
	tried, limited := 0, 0
	for i := range 8 {
		node := a
		if i%2 == 1 {
			node = b
		}
		r := signIn(node, "Nobody", "a wrong password")
		switch {
		case r.Status == http.StatusTooManyRequests && r.Header.Get("Retry-After") != "":
			limited++
		case r.Status == http.StatusUnauthorized:
			tried++
		default:
			t.Fatalf("sign-in %d: %d %s", i, r.Status, r.Body)
		}
	}
	if tried > 4 {
		t.Fatalf("one address tried %d sign-ins over two nodes with --signin-rate-limit 4 (%d refused)", tried, limited)
	}
}
