package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
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
