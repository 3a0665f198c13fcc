//go:build !race

// The race detector drops sync.Pool's items at random, and slog's handlers
// pool their buffers: allocation counts hold only without it.

package observe

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAccessLineAllocations: an access line with every attribute costs the
// record one allocation for its attributes, however many optional ones it
// carries, besides what the handler itself does: slog's JSON handler pools
// its buffers, but encodes a float (the duration in milliseconds) with
// encoding/json, which allocates once.
func TestAccessLineAllocations(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	r := httptest.NewRequest(http.MethodGet, "/get?uuid=x", nil)
	aw := &accessWriter{ResponseWriter: httptest.NewRecorder(), status: 200, bytes: 33328}
	rec := RecordFields{Route: "/get", RequestID: "get_1", KeyID: "0123456789abcdef", World: "demo", User: "Alice",
		RPC: "/relay.v1.DocumentService/GetDocument", Code: "OK", Error: "none"}
	ctx := context.Background()
	if n := testing.AllocsPerRun(200, func() {
		writeAccessLine(ctx, log, r, r.URL.Path, aw, &rec, 200, time.Millisecond)
	}); n > 2 {
		t.Fatalf("%v allocations per access line, want at most 2", n)
	}
}
