package netlimit

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a [BodyGuard].
const (
	// DefaultBodyReadTimeout is the default time allowance of a request
	// body (see [BodyGuard]).
	DefaultBodyReadTimeout = 30 * time.Second
	// DefaultBodyMinRate is the default rate, in bytes per second, a
	// request body must keep up: 16 KiB/s (128 kbit/s), so that a 64 MiB
	// upload may take over an hour while a trickle is cut off.
	DefaultBodyMinRate = 16 << 10
)

// ErrSlowBody is the error a guarded request body returns once it arrived
// too slowly; it also matches os.ErrDeadlineExceeded.
var ErrSlowBody = errors.New("request body arrived too slowly")

// BodyGuard makes every request body keep arriving: a body has a read
// deadline that moves forward as its bytes arrive, so that a body of any
// length succeeds at a reasonable rate while a trickle is cut off.
//
// The rule is a time allowance, a credit in seconds. A body starts with
// the whole allowance (Timeout); the time the handler spends waiting in
// Read is taken from it; every byte that arrives adds 1/MinRate seconds,
// up to the whole allowance again. The read deadline is always the moment
// the credit runs out. So a body must average at least MinRate bytes per
// second of waiting, may pause for at most Timeout at once, and is never
// charged for time the handler spends elsewhere (writing a file, calling
// the world), since the client cannot send while nobody reads. A fixed
// deadline would have to choose between cutting off large uploads and
// holding a trickle for as long as the deadline.
//
// The deadline is set through http.ResponseController: on HTTP/1.1 it is
// the connection's read deadline, on HTTP/2 the stream's (so one HTTP/2
// connection carrying many trickling streams has each of them cut off,
// and the connection then ends with its idle time-out). It is set when
// the handler starts, so that a body the handler never reads is bounded
// too (net/http reads what is left of it before answering, to keep the
// connection), and it is cleared once the body has ended: a request whose
// body is in (an event stream, a gRPC stream once its client has sent its
// request) is never cut by it. A body that runs out of time fails with an
// error matching [ErrSlowBody] and os.ErrDeadlineExceeded; on HTTP/1.1 the
// connection then closes after the handler's answer.
type BodyGuard struct {
	// Timeout is the time allowance of a body (0: no deadline at all).
	Timeout time.Duration
	// MinRate is the rate in bytes per second a body must keep up; 0
	// means bytes earn no time, so the whole body must arrive within
	// Timeout of waiting.
	MinRate int
	// Log, when set, receives a summary of the bodies cut off, at most
	// once a minute.
	Log *slog.Logger

	timedOut atomic.Uint64
	logMu    sync.Mutex
	lastLog  time.Time
}

// TimedOut counts the request bodies cut off for arriving too slowly.
func (g *BodyGuard) TimedOut() uint64 { return g.timedOut.Load() }

// Wrap returns next with every request body guarded. Requests without a
// body, and responses that cannot set a read deadline, pass as they are.
func (g *BodyGuard) Wrap(next http.Handler) http.Handler {
	if g.Timeout <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			next.ServeHTTP(w, r)
			return
		}
		b := &guardedBody{ReadCloser: r.Body, rc: http.NewResponseController(w), g: g, credit: g.Timeout}
		if g.MinRate > 0 {
			b.perByte = float64(time.Second) / float64(g.MinRate)
		}
		if err := b.setDeadline(time.Now().Add(b.credit)); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		// A shallow copy carries the guarded body: net/http keeps looking
		// at the original request, whose body it knows how to drain or
		// give up on once the handler is done.
		gr := r.WithContext(r.Context())
		gr.Body = b
		next.ServeHTTP(w, gr)
	})
}

// guardedBody is a request body under a BodyGuard. Like any request body it
// is read by one goroutine at a time; Close may come from another.
type guardedBody struct {
	io.ReadCloser
	rc *http.ResponseController
	g  *BodyGuard
	// perByte is the credit each byte earns, in nanoseconds.
	perByte float64
	// credit is the time the body may still spend arriving.
	credit time.Duration
	// deadline is the read deadline last set.
	deadline time.Time
	// done is set once the body ended or failed: it has no deadline any
	// more.
	done bool
}

// Read reads from the body under its deadline and settles its credit.
func (b *guardedBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	start := time.Now()
	// Moving a deadline costs a timer update (and on HTTP/2 a message to
	// the connection's goroutine): it moves only when it is off by more
	// than an eighth of the allowance.
	if want := start.Add(b.credit); absDuration(want.Sub(b.deadline)) > b.g.Timeout/8 {
		_ = b.setDeadline(want)
	}
	n, err := b.ReadCloser.Read(p)
	b.credit -= time.Since(start)
	b.credit = min(b.credit+time.Duration(float64(n)*b.perByte), b.g.Timeout)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		// The body is in: whatever the request does next (a long stream,
		// net/http watching the connection for the client going away)
		// has no read deadline.
		b.done = true
		_ = b.setDeadline(time.Time{})
	case isTimeout(err):
		b.done = true
		b.g.count()
		err = fmt.Errorf("%w (the relay needs at least %d bytes a second and allows pauses of up to %v): %w", ErrSlowBody, b.g.MinRate, b.g.Timeout, err)
	default:
		b.done = true
	}
	return n, err
}

// setDeadline sets the read deadline of the request.
func (b *guardedBody) setDeadline(t time.Time) error {
	b.deadline = t
	return b.rc.SetReadDeadline(t)
}

// count counts a body cut off and logs the count, at most once a minute.
func (g *BodyGuard) count() {
	n := g.timedOut.Add(1)
	if g.Log == nil {
		return
	}
	g.logMu.Lock()
	now := time.Now()
	due := g.lastLog.IsZero() || now.Sub(g.lastLog) >= refusalLogEvery
	if due {
		g.lastLog = now
	}
	g.logMu.Unlock()
	if due {
		g.Log.Warn("cut off request bodies that arrived too slowly", "total", n, "minRate", g.MinRate, "timeout", g.Timeout)
	}
}

// isTimeout reports whether a read failed on its deadline.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
