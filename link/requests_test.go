package link_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
)

// fakeApprovals approves with one admin key, "admin-key", and makes keys
// and pairing codes without a key store; it records what it made.
type fakeApprovals struct{ made int }

func (f *fakeApprovals) Approver(_ context.Context, apiKey string) (string, string, error) {
	if apiKey != "admin-key" {
		return "", "", &link.Refusal{Status: http.StatusUnauthorized, Msg: "Invalid API key"}
	}
	return "admin", "operator", nil
}

func (f *fakeApprovals) CreateKey(context.Context, string, link.KeyGrant) (string, string, error) {
	f.made++
	return "key1", "rk_secret", nil
}

func (f *fakeApprovals) CreatePairingCode(context.Context, string, string) (string, error) {
	f.made++
	return "ABCDEF", nil
}

// call sends a JSON request to the service and returns the status and
// body.
func (e *env) call(method, path, key string, body any) (int, string) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.srv.URL+path, rd)
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(bytes.TrimSpace(b))
}

func (e *env) openRequest(path string, body any) string {
	e.t.Helper()
	st, b := e.call("POST", path, "", body)
	if st != http.StatusCreated {
		e.t.Fatalf("open %s: %d %s", path, st, b)
	}
	var ans struct{ Code string }
	_ = json.Unmarshal([]byte(b), &ans)
	return ans.Code
}

// TestRequestExpiry moves the clock: a request left pending expires after
// ten minutes (410 on its status and its approval), an approved one gives
// its asker ten minutes from the approval to fetch it, and a request is
// forgotten (404) ten minutes after it expired.
func TestRequestExpiry(t *testing.T) {
	approvals := &fakeApprovals{}
	var store *link.MemoryRequests
	e := newEnv(t, func(c *link.Config) {
		store = link.NewMemoryRequests(0, c.Now)
		c.Requests, c.Approvals = store, approvals
	})
	keyBody := map[string]any{"appName": "bot", "scopes": []string{"entity:read"}}
	pending := e.openRequest(link.PathKeyRequest, keyBody)
	approved := e.openRequest(link.PathPairRequest, map[string]any{"worldId": "w"})

	e.clock.advance(5 * time.Minute)
	if st, b := e.call("POST", link.PathPairRequest+"/"+approved+"/approve", "admin-key", nil); st != http.StatusOK {
		t.Fatalf("approve: %d %s", st, b)
	}
	e.clock.advance(5*time.Minute + time.Second)
	if st, b := e.call("GET", link.PathKeyRequest+"/"+pending+"/status", "", nil); st != http.StatusGone || b != `{"status":"expired"}` {
		t.Fatalf("status after ten minutes: %d %s", st, b)
	}
	if st, b := e.call("POST", link.PathKeyRequest+"/"+pending+"/approve", "admin-key", nil); st != http.StatusGone || b != `{"error":"Key request has expired"}` {
		t.Fatalf("approve after ten minutes: %d %s", st, b)
	}
	if approvals.made != 1 {
		t.Fatalf("%d things made, want 1 (the approved pair request's code)", approvals.made)
	}
	// Approved five minutes ago: still there to fetch.
	if st, b := e.call("GET", link.PathPairRequest+"/"+approved+"/status", "", nil); st != http.StatusOK || b != `{"pairingCode":"ABCDEF","status":"approved"}` {
		t.Fatalf("approved status: %d %s", st, b)
	}
	late := e.openRequest(link.PathPairRequest, map[string]any{"worldId": "w2"})
	if st, _ := e.call("POST", link.PathPairRequest+"/"+late+"/approve", "admin-key", nil); st != http.StatusOK {
		t.Fatal("approve")
	}
	e.clock.advance(10 * time.Minute)
	if st, b := e.call("GET", link.PathPairRequest+"/"+late+"/status", "", nil); st != http.StatusGone || b != `{"status":"expired"}` {
		t.Fatalf("approved but not fetched in ten minutes: %d %s", st, b)
	}
	e.clock.advance(10 * time.Minute)
	if st, b := e.call("GET", link.PathKeyRequest+"/"+pending+"/status", "", nil); st != http.StatusNotFound || b != `{"error":"Key request not found"}` {
		t.Fatalf("status long after expiry: %d %s", st, b)
	}
}

// TestMemoryRequestsBounded: the store of a relay alone holds at most its
// bound; past it, expired requests make room, and otherwise opening a
// request is refused with 503 and nothing is stored.
func TestMemoryRequestsBounded(t *testing.T) {
	e := newEnv(t, func(c *link.Config) {
		c.Requests, c.Approvals = link.NewMemoryRequests(2, c.Now), &fakeApprovals{}
	})
	body := map[string]any{"worldId": "w"}
	e.openRequest(link.PathPairRequest, body)
	e.openRequest(link.PathPairRequest, body)
	if st, b := e.call("POST", link.PathPairRequest, "", body); st != http.StatusServiceUnavailable {
		t.Fatalf("third request: %d %s", st, b)
	}
	e.clock.advance(20 * time.Minute)
	e.openRequest(link.PathPairRequest, body)
}
