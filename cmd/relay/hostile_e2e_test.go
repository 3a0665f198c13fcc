package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/keys"
)

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.RateLimit, c.RateLimitBurst = 3, 3 })
	ctx := t.Context()
	newKey := func(name string) string {
		plain, _, err := tr.Keys().Create(ctx, keys.Spec{Name: name, Scopes: keys.AllScopes})
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	limited, other := newKey("limited"), newKey("other")
	// Opening a stream spends one token, once: it stays open and keeps
	// delivering after the key has run out.
	stream := tr.openStream("/actor/subscribe", limited, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	stream.expect("connected")
	for i := range 2 {
		if resp := tr.Do(http.MethodGet, "/get", limited, relaytest.Q("uuid", relaytest.AriaUUID), nil); resp.Status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, resp.Status, resp.Body)
		}
	}
	resp := tr.Do(http.MethodGet, "/get", limited, relaytest.Q("uuid", relaytest.AriaUUID), nil)
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("over the limit: %d %s", resp.Status, resp.Body)
	}
	// Three a minute: the next token comes back within 20 s.
	if retry, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || retry < 1 || retry > 20 {
		t.Fatalf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if msg := resp.ErrorText(t); !strings.Contains(msg, "Rate limit exceeded") || resp.JSON(t)["requestId"] == "" {
		t.Fatalf("error body: %s", resp.Body)
	}
	// Writes are refused as well, and change nothing.
	resp = tr.Do(http.MethodPut, "/update", limited, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": "Limited"}})
	if resp.Status != http.StatusTooManyRequests {
		t.Fatalf("write over the limit: %d %s", resp.Status, resp.Body)
	}
	// Another key is not affected, and the open stream still delivers.
	tr.setHP(relaytest.AriaUUID, 4)
	if f := stream.next(5 * time.Second); !strings.Contains(f.data, relaytest.AriaUUID) || strings.Contains(f.data, "Limited") {
		t.Fatalf("event after the limit: %s %s", f.event, f.data)
	}
	if resp := tr.Do(http.MethodGet, "/get", other, relaytest.Q("uuid", relaytest.AriaUUID), nil); resp.Status != http.StatusOK {
		t.Fatalf("another key: %d %s", resp.Status, resp.Body)
	}
	// Opening another stream over the limit is refused too.
	sresp, cancel := tr.startStream("/actor/subscribe", limited, nil, nil)
	defer cancel()
	if sresp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("stream over the limit: %d", sresp.StatusCode)
	}
	if retry, err := strconv.Atoi(sresp.Header.Get("Retry-After")); err != nil || retry < 1 || retry > 20 {
		t.Fatalf("stream over the limit: Retry-After = %q", sresp.Header.Get("Retry-After"))
	}
}

func TestQueryAndHeaderLimits(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxQueryBytes = 1024 })
	long := strings.Repeat("a", 1100)
	for _, path := range []string{"/get", "/search", "/hooks/subscribe", "/download", "/nowhere"} {
		resp := tr.Do(http.MethodGet, path, tr.AdminKey, relaytest.Q("query", long), nil)
		if resp.Status != http.StatusRequestURITooLong || !strings.Contains(resp.ErrorText(t), "Query string too long") {
			t.Errorf("%s with a long query: %d %s", path, resp.Status, resp.Body)
		}
	}
	// The same parameter fits in the body.
	resp := tr.Do(http.MethodPost, "/search", tr.AdminKey, nil, map[string]any{"query": long})
	if resp.Status == http.StatusRequestURITooLong {
		t.Fatalf("long parameter in the body: %d %s", resp.Status, resp.Body)
	}
	if resp := tr.Do(http.MethodGet, "/search", tr.AdminKey, relaytest.Q("query", "Aria"), nil); resp.Status != http.StatusOK {
		t.Fatalf("short query: %d %s", resp.Status, resp.Body)
	}
	// Headers beyond the server's limit (64 KiB) never reach the gateway.
	req, err := http.NewRequest(http.MethodGet, tr.Base+"/get?uuid="+relaytest.AriaUUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", tr.AdminKey)
	req.Header.Set("X-Padding", strings.Repeat("p", 80<<10))
	hresp, err := tr.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("80 KiB header: %d", hresp.StatusCode)
	}
}

func TestRequestTimeoutSparesStreams(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.RequestTimeout = 300 * time.Millisecond
		c.ScriptTimeout = 10 * time.Second
		c.EventKeepalive = 100 * time.Millisecond
	})
	stream := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	stream.expect("connected")
	start := time.Now()
	resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": "for (;;) {}"})
	if took := time.Since(start); resp.Status != http.StatusGatewayTimeout || took > 5*time.Second {
		t.Fatalf("slow call: %d after %v: %s", resp.Status, took, resp.Body)
	}
	if !strings.Contains(resp.ErrorText(t), "timed out") {
		t.Fatalf("error message: %s", resp.Body)
	}
	// Well past the unary time-out, the stream is still open and delivers.
	time.Sleep(time.Second)
	tr.setHP(relaytest.AriaUUID, 5)
	if f := stream.next(5 * time.Second); !strings.Contains(f.data, relaytest.AriaUUID) {
		t.Fatalf("event after the time-out: %s %s", f.event, f.data)
	}
	// Quick calls are unaffected.
	if resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil); resp.Status != http.StatusOK {
		t.Fatalf("quick call: %d %s", resp.Status, resp.Body)
	}
}
