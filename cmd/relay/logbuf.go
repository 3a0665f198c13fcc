package main

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logBuffer batches log output: the relay writes a line for every call,
// and a write system call per line was a measurable share of a busy
// relay's CPU. Lines wait at most flushEvery (or until logBufferLimit bytes
// gather); records at Warn and above are written at once (see
// flushingHandler), and Close writes whatever is left. A process killed
// outright loses at most the last flushEvery of Info lines.
type logBuffer struct {
	out io.Writer

	mu  sync.Mutex
	buf []byte

	stop chan struct{}
	done chan struct{}
}

// logBufferLimit is the size at which buffered lines are written without
// waiting for the ticker.
const logBufferLimit = 64 << 10

func newLogBuffer(out io.Writer, flushEvery time.Duration) *logBuffer {
	b := &logBuffer{out: out, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		t := time.NewTicker(flushEvery)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-t.C:
				_ = b.Flush()
			}
		}
	}()
	return b
}

// Write buffers p; slog handlers write one whole record per call.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) >= logBufferLimit {
		if err := b.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush writes what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushLocked()
}

func (b *logBuffer) flushLocked() error {
	if len(b.buf) == 0 {
		return nil
	}
	_, err := b.out.Write(b.buf)
	b.buf = b.buf[:0]
	return err
}

// Close stops the ticker and writes what is left.
func (b *logBuffer) Close() error {
	close(b.stop)
	<-b.done
	return b.Flush()
}

// flushingHandler writes records at Warn and above through at once, so
// that problems are never held back in the buffer. When it writes JSON
// with no attributes or groups of its own (jsonLines), it also takes lines
// the access log encodes by hand (observe.JSONLineWriter), which are then
// buffered and flushed as its own records are.
type flushingHandler struct {
	slog.Handler
	buf       *logBuffer
	jsonLines bool
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		_ = h.buf.Flush()
	}
	return err
}

// WritesJSONLines reports whether lines encoded as slog.JSONHandler
// encodes them are what this handler would write.
func (h flushingHandler) WritesJSONLines() bool { return h.jsonLines }

// WriteJSONLine buffers one hand-encoded line, written at once (with what
// waited before it) at Warn and above.
func (h flushingHandler) WriteJSONLine(level slog.Level, line []byte) error {
	_, err := h.buf.Write(line)
	if level >= slog.LevelWarn {
		if ferr := h.buf.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

// WithAttrs and WithGroup return handlers that write their records
// through slog only: a hand-encoded line would lack their attributes.
func (h flushingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return flushingHandler{Handler: h.Handler.WithAttrs(attrs), buf: h.buf}
}

func (h flushingHandler) WithGroup(name string) slog.Handler {
	return flushingHandler{Handler: h.Handler.WithGroup(name), buf: h.buf}
}
