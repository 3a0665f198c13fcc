package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/relaytest"
)

// lockedBuffer is a bytes.Buffer safe for the flusher goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestLogBuffer(t *testing.T) {
	out := &lockedBuffer{}
	buf := newLogBuffer(out, time.Hour) // only explicit flushes in this test
	log := slog.New(flushingHandler{Handler: slog.NewJSONHandler(buf, nil), buf: buf})

	log.Info("first")
	if got := out.String(); got != "" {
		t.Fatalf("an Info line was written at once: %q", got)
	}
	log.Warn("trouble")
	if got := out.String(); !strings.Contains(got, `"msg":"first"`) || !strings.Contains(got, `"msg":"trouble"`) {
		t.Fatalf("a Warn line must write itself and what waited before it; wrote %q", got)
	}
	log.With("k", "v").Info("last")
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); !strings.Contains(got, `"msg":"last","k":"v"`) {
		t.Fatalf("Close must write what is left; wrote %q", got)
	}

	// The ticker writes buffered lines by itself.
	ticked := &lockedBuffer{}
	buf2 := newLogBuffer(ticked, 5*time.Millisecond)
	defer buf2.Close()
	slog.New(slog.NewJSONHandler(buf2, nil)).Info("later")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(ticked.String(), "later") {
		if time.Now().After(deadline) {
			t.Fatal("the buffered line was never written")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLoggerTakesEncodedLines: the JSON logger takes the access log's
// hand-encoded lines into the same buffer as its own records (an Info line
// waits, a Warn line writes itself and what waited), while a text logger
// and a logger with attributes of its own do not offer to.
func TestLoggerTakesEncodedLines(t *testing.T) {
	out := &lockedBuffer{}
	log, buf, err := newLogger("json", "info", out)
	if err != nil {
		t.Fatal(err)
	}
	w, ok := log.Handler().(observe.JSONLineWriter)
	if !ok || !w.WritesJSONLines() {
		t.Fatal("the JSON logger does not take encoded lines")
	}
	if lw, ok := log.With("k", "v").Handler().(observe.JSONLineWriter); ok && lw.WritesJSONLines() {
		t.Error("a logger with attributes of its own takes encoded lines, which would lack them")
	}
	if lw, ok := log.WithGroup("g").Handler().(observe.JSONLineWriter); ok && lw.WritesJSONLines() {
		t.Error("a logger with a group takes encoded lines")
	}
	text, textBuf, err := newLogger("text", "info", out)
	if err != nil {
		t.Fatal(err)
	}
	defer textBuf.Close()
	if tw, ok := text.Handler().(observe.JSONLineWriter); ok && tw.WritesJSONLines() {
		t.Error("the text logger takes JSON lines")
	}

	if err := w.WriteJSONLine(slog.LevelInfo, []byte(`{"msg":"first"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	log.Info("second")
	if got := out.String(); got != "" {
		t.Fatalf("Info lines were written at once: %q", got)
	}
	if err := w.WriteJSONLine(slog.LevelWarn, []byte(`{"msg":"third"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	first, second, third := strings.Index(got, `"msg":"first"`), strings.Index(got, `"msg":"second"`), strings.Index(got, `"msg":"third"`)
	if first < 0 || second < first || third < second {
		t.Fatalf("a Warn line must write itself after what waited, in order; wrote %q", got)
	}
	if err := w.WriteJSONLine(slog.LevelInfo, []byte(`{"msg":"last"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	if err := buf.Close(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(out.String(), `{"msg":"last"}`+"\n") {
		t.Fatalf("Close must write the last encoded line; wrote %q", out.String())
	}
}

// TestAccessLineThroughRelayLogger: a relay logging through the JSON
// logger of `relay serve` writes each REST request's access line, encoded
// by hand, with the documented fields and the types slog gives them.
func TestAccessLineThroughRelayLogger(t *testing.T) {
	t.Parallel()
	out := &lockedBuffer{}
	log, buf, err := newLogger("json", "info", out)
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, the buffer closes after the relay has stopped.
	t.Cleanup(func() { _ = buf.Close() })
	tr := startTestRelayLogged(t, log)
	resp := tr.Do("GET", "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("GET /get: %d %s", resp.Status, resp.Body)
	}
	// The line is written once the answer has left, which may be after
	// the client has read it.
	var line map[string]any
	for deadline := time.Now().Add(10 * time.Second); line == nil; time.Sleep(5 * time.Millisecond) {
		if err := buf.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(out.String(), "\n") {
			var v map[string]any
			if json.Unmarshal([]byte(l), &v) == nil && v["msg"] == "http" && v["path"] == "/get" {
				line = v
			}
		}
		if line == nil && time.Now().After(deadline) {
			t.Fatalf("no access line for GET /get in %q", out.String())
		}
	}
	for key, want := range map[string]any{"level": "INFO", "method": "GET", "route": "/get", "status": 200.0,
		"clientId": "demo", "rpc": "/relay.v1.DocumentService/GetDocument", "code": "OK", "requestId": resp.Header.Get("X-Request-Id")} {
		if line[key] != want {
			t.Errorf("%s: %v, want %v (line %v)", key, line[key], want, line)
		}
	}
	if b, ok := line["bytes"].(float64); !ok || int(b) != len(resp.Body) {
		t.Errorf("bytes: %v, want %d", line["bytes"], len(resp.Body))
	}
	if _, ok := line["durationMs"].(float64); !ok {
		t.Errorf("durationMs: %v", line["durationMs"])
	}
	for _, key := range []string{"time", "keyId", "remote"} {
		if s, _ := line[key].(string); s == "" {
			t.Errorf("%s missing: %v", key, line)
		}
	}
}
