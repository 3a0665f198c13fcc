package link_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
)

// flakyStore is a pairing store that is unavailable while down is set, as
// a cluster's shared store is while JetStream elects a leader.
type flakyStore struct {
	link.Store
	down atomic.Bool
}

func (s *flakyStore) unavailable() error {
	return world.Wrapf(world.ErrUnavailable, context.DeadlineExceeded, "The cluster's shared state has no leader at the moment: try again")
}

func (s *flakyStore) TakeCode(ctx context.Context, h link.Hash, now time.Time) (link.Code, error) {
	if s.down.Load() {
		return link.Code{}, s.unavailable()
	}
	return s.Store.TakeCode(ctx, h, now)
}

func (s *flakyStore) World(ctx context.Context, clientID string) (link.World, error) {
	if s.down.Load() {
		return link.World{}, s.unavailable()
	}
	return s.Store.World(ctx, clientID)
}

func (s *flakyStore) TokenWorld(ctx context.Context, h link.Hash) (string, error) {
	if s.down.Load() {
		return "", s.unavailable()
	}
	return s.Store.TokenWorld(ctx, h)
}

// TestStoreUnavailableIs503 checks the module's plain HTTP calls while the
// pairing store is unavailable for a moment: each answers 503 with
// Retry-After, so the module tries again, never 500; and each works once
// the store is back.
func TestStoreUnavailableIs503(t *testing.T) {
	t.Parallel()
	var flaky *flakyStore
	e := newEnv(t, func(c *link.Config) { flaky = &flakyStore{Store: c.Store}; c.Store = flaky })
	tt := e.tabletop()
	if _, err := tt.Pair(context.Background(), e.code("")); err != nil {
		t.Fatal(err)
	}
	clientID, token := tt.Credentials()
	// In this order, each call works once the store is back: the world
	// unpairs itself, then pairs again with a new code.
	calls := []struct {
		name, method, path, body string
		ok                       int
	}{
		{"active", http.MethodGet, "/api/clients/" + clientID + "/active", "", http.StatusOK},
		{"self-unpair", http.MethodPost, link.PathSelfUnpair, `{"token":"` + token + `"}`, http.StatusOK},
		{"pair", http.MethodPost, link.PathPair, `{"code":"` + e.code(clientID) + `","worldId":"tavern-tales","serverFingerprint":"fp-0123456789abcdef0123456789abcd"}`, http.StatusOK},
	}
	do := func(method, path, body string) (int, string, string) {
		req, _ := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out.Error, resp.Header.Get("Retry-After")
	}
	flaky.down.Store(true)
	for _, c := range calls {
		status, msg, retry := do(c.method, c.path, c.body)
		if status != http.StatusServiceUnavailable || retry == "" || !strings.Contains(msg, "unavailable") {
			t.Errorf("%s while the store is down: %d %q (Retry-After %q), want 503 with Retry-After", c.name, status, msg, retry)
		}
	}
	flaky.down.Store(false)
	for _, c := range calls {
		if status, msg, _ := do(c.method, c.path, c.body); status != c.ok {
			t.Errorf("%s once the store is back: %d %q, want %d", c.name, status, msg, c.ok)
		}
	}
}
