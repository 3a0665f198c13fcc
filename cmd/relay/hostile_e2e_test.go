package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/server/keys"
)

func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *serveConfig) { c.rateLimit, c.rateLimitBurst = 3, 3 })
	ctx := t.Context()
	newKey := func(name string) string {
		plain, _, err := tr.keys.Create(ctx, keys.Spec{Name: name, Scopes: keys.AllScopes})
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	limited, other := newKey("limited"), newKey("other")
	// Opening a stream spends one token, once: it stays open and keeps
	// delivering after the key has run out.
	stream := tr.openStream("/actor/subscribe", limited, q("actorUuid", ariaUUID), nil)
	stream.expect("connected")
	for i := range 2 {
		if resp := tr.do(http.MethodGet, "/get", limited, q("uuid", ariaUUID), nil); resp.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i+1, resp.status, resp.body)
		}
	}
	resp := tr.do(http.MethodGet, "/get", limited, q("uuid", ariaUUID), nil)
	if resp.status != http.StatusTooManyRequests {
		t.Fatalf("over the limit: %d %s", resp.status, resp.body)
	}
	// Three a minute: the next token comes back within 20 s.
	if retry, err := strconv.Atoi(resp.header.Get("Retry-After")); err != nil || retry < 1 || retry > 20 {
		t.Fatalf("Retry-After = %q", resp.header.Get("Retry-After"))
	}
	if msg := resp.errorText(t); !strings.Contains(msg, "Rate limit exceeded") || resp.json(t)["requestId"] == "" {
		t.Fatalf("error body: %s", resp.body)
	}
	// Writes are refused as well, and change nothing.
	resp = tr.do(http.MethodPut, "/update", limited, nil, map[string]any{"uuid": ariaUUID, "data": map[string]any{"name": "Limited"}})
	if resp.status != http.StatusTooManyRequests {
		t.Fatalf("write over the limit: %d %s", resp.status, resp.body)
	}
	// Another key is not affected, and the open stream still delivers.
	tr.setHP(ariaUUID, 4)
	if f := stream.next(5 * time.Second); !strings.Contains(f.data, ariaUUID) || strings.Contains(f.data, "Limited") {
		t.Fatalf("event after the limit: %s %s", f.event, f.data)
	}
	if resp := tr.do(http.MethodGet, "/get", other, q("uuid", ariaUUID), nil); resp.status != http.StatusOK {
		t.Fatalf("another key: %d %s", resp.status, resp.body)
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
	tr := startTestRelay(t, func(c *serveConfig) { c.maxQueryBytes = 1024 })
	long := strings.Repeat("a", 1100)
	for _, path := range []string{"/get", "/search", "/hooks/subscribe", "/download", "/nowhere"} {
		resp := tr.do(http.MethodGet, path, tr.adminKey, q("query", long), nil)
		if resp.status != http.StatusRequestURITooLong || !strings.Contains(resp.errorText(t), "Query string too long") {
			t.Errorf("%s with a long query: %d %s", path, resp.status, resp.body)
		}
	}
	// The same parameter fits in the body.
	resp := tr.do(http.MethodPost, "/search", tr.adminKey, nil, map[string]any{"query": long})
	if resp.status == http.StatusRequestURITooLong {
		t.Fatalf("long parameter in the body: %d %s", resp.status, resp.body)
	}
	if resp := tr.do(http.MethodGet, "/search", tr.adminKey, q("query", "Aria"), nil); resp.status != http.StatusOK {
		t.Fatalf("short query: %d %s", resp.status, resp.body)
	}
	// Headers beyond the server's limit (64 KiB) never reach the gateway.
	req, err := http.NewRequest(http.MethodGet, tr.base+"/get?uuid="+ariaUUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", tr.adminKey)
	req.Header.Set("X-Padding", strings.Repeat("p", 80<<10))
	hresp, err := tr.client.Do(req)
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
	tr := startTestRelay(t, func(c *serveConfig) {
		c.requestTimeout = 300 * time.Millisecond
		c.scriptTimeout = 10 * time.Second
		c.eventKeepalive = 100 * time.Millisecond
	})
	stream := tr.openStream("/actor/subscribe", tr.adminKey, q("actorUuid", ariaUUID), nil)
	stream.expect("connected")
	start := time.Now()
	resp := tr.do(http.MethodPost, "/execute-js", tr.adminKey, nil, map[string]any{"script": "for (;;) {}"})
	if took := time.Since(start); resp.status != http.StatusGatewayTimeout || took > 5*time.Second {
		t.Fatalf("slow call: %d after %v: %s", resp.status, took, resp.body)
	}
	if !strings.Contains(resp.errorText(t), "timed out") {
		t.Fatalf("error message: %s", resp.body)
	}
	// Well past the unary time-out, the stream is still open and delivers.
	time.Sleep(time.Second)
	tr.setHP(ariaUUID, 5)
	if f := stream.next(5 * time.Second); !strings.Contains(f.data, ariaUUID) {
		t.Fatalf("event after the time-out: %s %s", f.event, f.data)
	}
	// Quick calls are unaffected.
	if resp := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", ariaUUID), nil); resp.status != http.StatusOK {
		t.Fatalf("quick call: %d %s", resp.status, resp.body)
	}
}
