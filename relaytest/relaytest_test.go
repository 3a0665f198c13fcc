package relaytest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestMain lets this test binary run the relays' execute-js scripts.
func TestMain(m *testing.M) {
	relaytest.Main(m)
}

// TestStart checks what the harness promises: a relay on a loopback port
// with the demo world in a fresh data directory and an admin key, the
// mutators applied, REST and gRPC clients that reach it, keys made through
// the API, the envelope helpers, and scripts that run in this test binary.
func TestStart(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t, func(c *node.Config) { c.MaxQueryBytes = 1024 })

	if !strings.HasPrefix(r.Base, "http://127.0.0.1:") || r.Base != "http://"+r.Addr() || r.AdminKey == "" {
		t.Fatalf("base %q, addr %q, admin key %q", r.Base, r.Addr(), r.AdminKey)
	}
	if _, err := os.Stat(filepath.Join(r.DataDir, "admin.key")); err != nil {
		t.Fatalf("data directory: %v", err)
	}

	aria := r.Do(http.MethodGet, "/get", r.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil)
	if aria.Status != http.StatusOK || aria.JSON(t)["type"] != "entity-result" || aria.Data(t)["name"] == nil {
		t.Fatalf("GET /get: %d %s", aria.Status, aria.Body)
	}
	if resp := r.Do(http.MethodGet, "/get", "", relaytest.Q("uuid", relaytest.AriaUUID), nil); resp.Status != http.StatusUnauthorized || resp.ErrorText(t) == "" {
		t.Fatalf("GET /get without a key: %d %s", resp.Status, resp.Body)
	}
	// The mutator took effect: a query past 1024 bytes is refused.
	if resp := r.Do(http.MethodGet, "/get", r.AdminKey, relaytest.Q("uuid", strings.Repeat("x", 2000)), nil); resp.Status != http.StatusRequestURITooLong {
		t.Fatalf("a long query: %d %s", resp.Status, resp.Body)
	}

	key, id := r.NewKey(&relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}})
	if key == "" || id == "" {
		t.Fatalf("NewKey: %q %q", key, id)
	}
	if got := r.Do(http.MethodGet, "/get", key, relaytest.Q("uuid", relaytest.PotionUUID), nil); got.Status != http.StatusOK {
		t.Fatalf("GET /get with a new key: %d %s", got.Status, got.Body)
	}
	if got := r.Do(http.MethodPost, "/execute-js", key, nil, map[string]any{"script": "return 1"}); got.Status != http.StatusForbidden {
		t.Fatalf("a script without its scope: %d %s", got.Status, got.Body)
	}

	run := r.Do(http.MethodPost, "/execute-js", r.AdminKey, nil, map[string]any{"script": "return 6 * 7"})
	if run.Status != http.StatusOK || !strings.Contains(string(run.Body), "42") {
		t.Fatalf("POST /execute-js: %d %s", run.Status, run.Body)
	}
}
