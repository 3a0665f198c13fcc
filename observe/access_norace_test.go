//go:build !race

// The race detector drops sync.Pool's items at random, and slog's handlers
// pool their buffers: allocation counts hold only without it.

package observe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
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
	l := &accessLine{method: http.MethodGet, path: "/get", remote: "192.0.2.1:1234", status: 200, bytes: 33328, start: time.Now()}
	rec := RecordFields{Route: "/get", RequestID: "get_1", KeyID: "0123456789abcdef", World: "demo", User: "Alice",
		RPC: "/relay.v1.DocumentService/GetDocument", Code: "OK", Error: "none"}
	ctx := context.Background()
	if n := testing.AllocsPerRun(200, func() {
		writeAccessLine(ctx, log, l, l.path, &rec, time.Millisecond)
	}); n > 2 {
		t.Fatalf("%v allocations per access line, want at most 2", n)
	}
}

// TestAccessLineAllocationsHandEncoded: through a logger that takes
// encoded lines (the relay's own, writing JSON), an access line is built
// in a recycled buffer and allocates nothing.
func TestAccessLineAllocationsHandEncoded(t *testing.T) {
	log := slog.New(&lineCatcher{Handler: slog.NewJSONHandler(io.Discard, nil), out: new(bytes.Buffer)})
	l := &accessLine{method: http.MethodGet, path: "/get", remote: "192.0.2.1:1234", status: 200, bytes: 33328, start: time.Now()}
	rec := RecordFields{Route: "/get", RequestID: "get_1", KeyID: "0123456789abcdef", World: "demo", User: "Alice",
		RPC: "/relay.v1.DocumentService/GetDocument", Code: "OK", Error: "none"}
	ctx := context.Background()
	catcher := log.Handler().(*lineCatcher)
	if n := testing.AllocsPerRun(200, func() {
		catcher.out.Reset()
		writeAccessLine(ctx, log, l, l.path, &rec, time.Millisecond)
	}); n > 0 {
		t.Fatalf("%v allocations per access line, want none", n)
	}
	if catcher.lines == 0 {
		t.Fatal("no line was handed over encoded")
	}
}
