package gateway

import (
	"errors"
	"net"
	"time"

	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/observe"
)

// Detached event streams. Once an event stream over HTTP/1.1 has sent its
// headers and backlog, and its live events come from the event hub's
// writers (pushSink), nothing needs the handler's goroutine any more: the
// stream takes its connection over from net/http (Hijack), the process's
// poller watches it (poller_linux.go), and the handler returns. An idle
// stream then costs its connection, its subscription and a few small
// structures, and no goroutine:
//
//   - the hub's writers write its events straight to the connection, as
//     before; what the socket does not take at once waits in the stream's
//     pending bytes, the poller reports when the connection can take more,
//     and one of its writer goroutines writes them, then lets the
//     subscription hand over the events that waited meanwhile;
//   - bytes that wait longer than the connection's write-stall time-out
//     cut the stream off, as a stalled write does on any answer; a reader
//     that is slow but not stalled falls behind its subscription's queue
//     and gets the overflow notice, as before;
//   - the poller notices the peer going away (it reads the end of the
//     connection) and the stream ends at once, releasing its subscription
//     and its slots;
//   - the keepalive comment still goes out on a timer.
//
// Where the poller is not available (systems other than Linux) the stream
// keeps its goroutine, as do streams over TLS or HTTP/2, which never push.

// pushSink is a server.StreamDetacher (the gateway does not import the
// server: the stream's handler finds the methods on the call option it
// was given, and the tests of cmd/relay fail when it does not).

// defaultDetachedStall bounds how long a detached stream's bytes may wait
// for a client that takes none, when its connection has no write-stall
// time-out of its own (see netlimit).
const defaultDetachedStall = 60 * time.Second

// maxDiscardedInput bounds what a detached stream's client may send after
// its request (nothing, normally); past it the stream is cut off, so that
// a client cannot keep the poller reading.
const maxDiscardedInput = 64 << 10

// Errors that end a detached stream from the relay's side.
var (
	errPeerGone     = errors.New("the client closed the connection")
	errWriteStalled = errors.New("the client took no bytes within the write-stall time-out")
	errTooMuchInput = errors.New("the client kept sending on an event stream")
)

// Detach implements server.StreamDetacher: the stream takes its connection
// over once its backlog is out, unless the poller is not available.
func (p pushSink) Detach(gone func()) bool {
	d := p.directSink
	if !pollerSupported || d.raw == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.started || d.closed || d.failed != nil {
		return false
	}
	if len(d.frames) > 0 {
		if err := d.sw.write(d.frames); err != nil {
			d.failed = err
			return false
		}
		d.frames = d.frames[:0]
	}
	if !d.sw.detach(gone) {
		return false
	}
	// The response and the request are net/http's no longer: the stream
	// keeps nothing of them.
	d.detached = true
	d.w, d.r, d.cancel = nil, nil, nil
	d.releaseBuffer()
	return true
}

// EndDetached implements server.StreamDetacher.
func (p pushSink) EndDetached(last *relayv1.Event, err error) {
	var frame []byte
	if last != nil {
		if f, ferr := appendMessageFrame(nil, &relayv1.SubscribeHooksResponse{Event: last}); ferr == nil {
			frame = f
		}
	}
	p.sw.endDetached(frame, err)
}

// writeStallOf returns the write-stall time-out of a hijacked connection.
func writeStallOf(c net.Conn) time.Duration {
	for c != nil {
		if s, ok := c.(interface{ WriteStallTimeout() time.Duration }); ok {
			if d := s.WriteStallTimeout(); d > 0 {
				return d
			}
			break
		}
		p, ok := c.(plainConn)
		if !ok {
			break
		}
		c = p.PlainConn()
	}
	return defaultDetachedStall
}

// detach takes the stream's connection over from net/http and hands it to
// the poller: from then on nothing writes through the ResponseWriter, and
// gone is called, once, when the connection ends from the client's side
// (it went away, a write failed or stalled). It reports false, with
// nothing changed, when the stream cannot be detached.
func (s *sseWriter) detach(gone func()) bool {
	p, err := streamPoller()
	if err != nil || s.raw == nil {
		return false
	}
	s.mu.Lock()
	for s.busy {
		s.idle.Wait()
	}
	if s.failed != nil || s.stopped {
		s.mu.Unlock()
		return false
	}
	// The keepalive stays off the ResponseWriter while it is handed over.
	s.busy = true
	s.mu.Unlock()
	conn, _, err := s.rc.Hijack()
	if err != nil {
		s.release(nil, false)
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	s.idle.Broadcast()
	s.w, s.rc, s.cancel = nil, nil, nil
	s.detached = true
	s.conn = conn
	s.poll = p
	s.gone = gone
	s.stall = writeStallOf(conn)
	if s.rec != nil {
		// The access line waits for the stream's end, and counts what is
		// written from now on then.
		s.rec.AddBytes(s.rawBytes)
		s.rawBytes = 0
		s.ended = s.rec.Detach()
		s.rec = nil
	}
	var addErr error
	if err := s.raw.control(func(fd int) { s.token, addErr = p.add(fd, s) }); err != nil {
		addErr = err
	}
	if addErr != nil {
		s.fail(addErr)
		return true
	}
	if len(s.pending) > 0 {
		// A keepalive came while the connection was handed over.
		s.waitWritable()
	}
	return true
}

// waitWritable has the poller report when the connection can take the
// pending bytes, and starts the write-stall clock; the caller holds mu.
func (s *sseWriter) waitWritable() {
	if !s.watchingOut {
		var err error
		if cerr := s.raw.control(func(fd int) { err = s.poll.watchWrites(fd, s.token, true) }); cerr != nil {
			err = cerr
		}
		if err != nil {
			s.fail(err)
			return
		}
		s.watchingOut = true
	}
	s.armStall()
}

// armStall (re)starts the write-stall clock; the caller holds mu.
func (s *sseWriter) armStall() {
	if s.stallTimer == nil {
		s.stallTimer = time.AfterFunc(s.stall, s.stalled)
		return
	}
	s.stallTimer.Reset(s.stall)
}

// stalled cuts off a stream whose pending bytes waited a whole write-stall
// time-out without progress.
func (s *sseWriter) stalled() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 || s.connClosed {
		return
	}
	s.fail(errWriteStalled)
}

// writable writes the pending bytes of a detached stream, for the
// poller's writer goroutines, once its connection can take more; when all
// are out, the subscription hands over the events that waited meanwhile.
func (s *sseWriter) writable() {
	s.mu.Lock()
	if len(s.pending) == 0 || s.failed != nil || s.connClosed {
		s.mu.Unlock()
		return
	}
	n, err := s.raw.write(s.pending)
	s.rawBytes += int64(n)
	if err != nil {
		s.fail(err)
		s.mu.Unlock()
		return
	}
	if n < len(s.pending) {
		s.pending = s.pending[:copy(s.pending, s.pending[n:])]
		if n > 0 {
			s.armStall()
		}
		s.mu.Unlock()
		return
	}
	if cap(s.pending) > maxPooledFrame {
		s.pending = nil
	} else {
		s.pending = s.pending[:0]
	}
	s.wrote = true
	if s.stallTimer != nil {
		s.stallTimer.Stop()
	}
	if s.watchingOut {
		s.watchingOut = false
		_ = s.raw.control(func(fd int) { _ = s.poll.watchWrites(fd, s.token, false) })
	}
	resume := s.resume
	s.resume = nil
	if s.closeAfter {
		s.closeConn()
	}
	s.mu.Unlock()
	if resume != nil {
		resume()
	}
}

// readable reads what the client of a detached stream sent, for the
// poller: nothing is expected, and the end of the connection ends the
// stream. buf is the poller's.
func (s *sseWriter) readable(buf []byte) {
	var err error
	got := 0
	cerr := s.raw.control(func(fd int) {
		for {
			n, rerr := readFD(fd, buf)
			if rerr != nil {
				err = rerr
				return
			}
			if n == 0 {
				return
			}
			got += n
		}
	})
	if cerr != nil {
		return // closed meanwhile
	}
	if err == nil && got == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discarded += got
	if err == nil && s.discarded > maxDiscardedInput {
		err = errTooMuchInput
	}
	if err != nil {
		s.fail(err)
	}
}

// detachedFailed handles a failure of a detached stream; the caller holds
// mu, and fail has recorded err. A stream the relay already ended closes
// now; otherwise the handler's side is told, and ends it (EndDetached).
func (s *sseWriter) detachedFailed() {
	if s.closeAfter {
		s.closeConn()
		return
	}
	if s.gone != nil {
		gone := s.gone
		s.gone = nil
		go gone()
	}
}

// endDetached ends a detached stream: frame (the overflow notice, or
// nothing) goes out after what is pending, then the connection closes.
// err is how the stream ended, for the access line.
func (s *sseWriter) endDetached(frame []byte, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closeAfter || s.connClosed {
		return
	}
	s.closeAfter = true
	s.endErr = err
	s.gone = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.failed != nil {
		s.closeConn()
		return
	}
	if len(frame) > 0 {
		if len(s.pending) > 0 {
			s.pending = append(s.pending, frame...)
		} else {
			n, werr := s.raw.write(frame)
			s.rawBytes += int64(n)
			if werr != nil {
				s.fail(werr)
				return
			}
			if n < len(frame) {
				s.pending = append(s.pending, frame[n:]...)
				s.waitWritable()
			}
		}
	}
	if len(s.pending) == 0 {
		s.closeConn()
	}
}

// closeConn closes a detached stream's connection, once, and completes its
// access line; the caller holds mu.
func (s *sseWriter) closeConn() {
	if s.connClosed {
		return
	}
	s.connClosed = true
	s.stopped = true
	s.pending = nil
	s.resume = nil
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.stallTimer != nil {
		s.stallTimer.Stop()
	}
	if s.token != 0 {
		_ = s.raw.control(func(fd int) { s.poll.remove(fd, s.token) })
	}
	_ = s.conn.Close()
	if ended := s.ended; ended != nil {
		s.ended = nil
		end := observe.DetachedEnd{Bytes: s.rawBytes}
		if s.endErr != nil {
			st := status.Convert(s.endErr)
			end.Code, end.Error = st.Code().String(), st.Message()
		} else {
			end.Code = "OK"
		}
		go ended(end)
	}
}
