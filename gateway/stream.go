package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/wire"
)

// serveStream bridges a server-streaming event RPC to Server-Sent Events,
// with an optional stream ticket, forwarded as `x-stream-ticket` metadata
// for the server's authentication step.
//
// It calls the RPC through the gateway's client connection, so every
// interceptor runs, and waits for the stream's first message (the
// `connected` event every event stream sends at once) before committing to
// 200: a missing key, a missing scope or a bad parameter therefore answers
// with its real status and the usual error body. Then each message becomes a
// frame `id: <sequence>`, `event: <name>`, `data: <JSON>`, and a keepalive
// comment is written when nothing else was for a while. The stream ends when
// the caller goes away or the server ends it.
func (g *gateway) serveStream(w http.ResponseWriter, r *http.Request, rt *route, params []byte, ticket string) {
	ctx, cancel := context.WithCancel(withInvalidParams(r.Context()))
	defer cancel()
	req, err := newRequest(rt.input, params)
	if err != nil {
		g.writeError(w, http.StatusBadRequest, rt.operation, g.newRequestID(rt.operation), err.Error())
		return
	}
	if key := r.Header.Get(wire.APIKeyHeader); key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, key)
	}
	if ticket != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, wire.StreamTicketHeader, ticket)
	}
	var header metadata.MD
	// Over the relay's in-process connection the handler writes each
	// message out itself, through sink, without handing it to this
	// goroutine (see server.DirectSender); another connection ignores the
	// option, and the messages come through RecvMsg.
	sink := &directSink{g: g, w: w, r: r, rt: rt, raw: streamConn(r), cancel: cancel}
	var option grpc.CallOption = sink
	if sink.raw != nil {
		option = pushSink{sink}
	}
	stream, err := g.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, rt.fullMethod, grpc.Header(&header), option)
	if err == nil {
		err = stream.SendMsg(req)
	}
	if err == nil {
		err = stream.CloseSend()
	}
	msg := newStreamResponse(rt)
	if err == nil || errors.Is(err, io.EOF) {
		// A send that found the stream ended (io.EOF) leaves its status
		// to RecvMsg.
		err = stream.RecvMsg(msg)
	}
	if sink.finish() {
		// The handler wrote the stream itself, and it has ended.
		return
	}
	if err == nil {
		// The stream's header is in once its first message is (the call's
		// Header option is filled only when the stream ends).
		if received, herr := stream.Header(); herr == nil {
			header = metadata.Join(header, received)
		}
	}
	requestID := firstValue(header, wire.RequestIDHeader)
	if requestID == "" && stream != nil {
		requestID = firstValue(stream.Trailer(), wire.RequestIDHeader)
	}
	if requestID == "" {
		requestID = g.newRequestID(rt.operation)
	}
	if err != nil {
		g.writeStatus(w, status.Convert(err), rt.operation, requestID)
		return
	}
	sw := startSSE(w, r, requestID)
	stopKeepalive := sw.keepalive(g.keepaliveEvery)
	defer stopKeepalive()
	relayEvents(sw, stream, msg, []byte(ssePrefix))
}

// ssePrefix starts every event stream: the reconnection delay an
// EventSource should use.
const ssePrefix = "retry: 3000\n\n"

// startSSE commits an event stream's response: 200 and its headers.
func startSSE(w http.ResponseWriter, r *http.Request, requestID string) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no")
	if r.ProtoMajor == 1 {
		// No chunked coding on HTTP/1.x: the stream's end is the
		// connection's (as the SSE specification suggests), and each
		// batch of frames goes out as it is, in one write. net/http then
		// answers `Connection: close`.
		h.Set("Transfer-Encoding", "identity")
	}
	h.Set(wire.RequestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)
	sw := newSSEWriter(w)
	// The server's write deadline must not cut a long stream.
	_ = sw.rc.SetWriteDeadline(time.Time{})
	return sw
}

// directSink writes an event stream's messages as SSE frames in the
// handler's goroutine (it is a server.DirectSender): the first message
// commits the response (200), and messages the handler says come together
// go out in one write. The bridge's goroutine only waits for the stream's
// end, then calls finish; from then on the sink writes nothing, so nothing
// touches the response after the bridge returns.
type directSink struct {
	grpc.EmptyCallOption
	g  *gateway
	w  http.ResponseWriter
	r  *http.Request
	rt *route
	// raw is the stream's connection when its events may be written from
	// the hub's writers (see pushSink); cancel ends the stream.
	raw    syscall.RawConn
	cancel func()

	mu            sync.Mutex
	started       bool // the response is committed
	closed        bool // the bridge is done with the response
	failed        error
	sw            *sseWriter
	stopKeepalive func()
	buf           *[]byte // from framePool
	frames        []byte  // held frames, not written yet
	// detached is set once the stream took its connection over (see
	// detach.go): the bridge then leaves it alone.
	detached bool
}

// errStreamDone fails sends that come after the bridge returned.
var errStreamDone = errors.New("the event stream's response is finished")

// SendDirect implements server.DirectSender.
func (d *directSink) SendDirect(msg proto.Message, header metadata.MD, more bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case d.closed:
		return errStreamDone
	case d.failed != nil:
		return d.failed
	}
	if !d.started {
		d.started = true
		requestID := firstValue(header, wire.RequestIDHeader)
		if requestID == "" {
			requestID = d.g.newRequestID(d.rt.operation)
		}
		d.sw = startSSE(d.w, d.r, requestID)
		if d.raw != nil {
			d.sw.raw = newRawWriter(d.raw)
			d.sw.rec = observe.RecordFrom(d.r.Context())
		}
		d.sw.cancel = d.cancel
		d.stopKeepalive = d.sw.keepalive(d.g.keepaliveEvery)
		d.buf = framePool.Get().(*[]byte)
		d.frames = append((*d.buf)[:0], ssePrefix...)
	}
	frames, err := appendMessageFrame(d.frames, msg)
	if err != nil {
		d.failed = err
		return err
	}
	d.frames = frames
	if more && len(frames) < maxBatchBytes {
		return nil
	}
	if err := d.sw.write(frames); err != nil {
		d.failed = err
		return err
	}
	d.frames = frames[:0]
	return nil
}

// finish ends the sink's use of the response, once the stream ended or
// the caller went away, writing the frames it still held; it waits for a
// send in progress. It reports whether the sink committed the response.
func (d *directSink) finish() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if !d.started {
		return false
	}
	if d.detached {
		// The stream goes on without the bridge, and ends on its own.
		return true
	}
	if len(d.frames) > 0 && d.failed == nil {
		_ = d.sw.write(d.frames)
	}
	d.stopKeepalive()
	d.releaseBuffer()
	return true
}

// releaseBuffer gives the frame buffer back; the caller holds mu.
func (d *directSink) releaseBuffer() {
	if d.buf != nil {
		if cap(d.frames) > maxPooledFrame {
			*d.buf = nil
		} else {
			*d.buf = d.frames[:0]
		}
		framePool.Put(d.buf)
		d.buf, d.frames = nil, nil
	}
}

// pushSink is a directSink on a connection it can write to without
// blocking (HTTP/1.1 without TLS, on a system with raw writes): it is a
// server.EventFrameWriter, so the event hub's writer goroutines write the
// stream's live events, several subscribers' in turn, with no goroutine
// woken per subscriber, and the handler's goroutine only waits for the
// stream's end.
type pushSink struct{ *directSink }

// WriteEvents implements server.EventFrameWriter: it frames evs and hands
// them to the stream's writer without blocking (sseWriter.tryWrite).
func (p pushSink) WriteEvents(evs []wire.Event, resume func()) bool {
	buf := framePool.Get().(*[]byte)
	frames := (*buf)[:0]
	for _, ev := range evs {
		var err error
		if frames, err = appendEventFrame(frames, ev.Seq, ev.Name, ev.Data); err != nil {
			// A payload that is not JSON: the stream cannot go on
			// without a gap.
			p.sw.mu.Lock()
			p.sw.fail(err)
			p.sw.mu.Unlock()
			framePool.Put(buf)
			return true
		}
	}
	done := p.sw.tryWrite(frames, resume)
	if cap(frames) > maxPooledFrame {
		*buf = nil
	} else {
		*buf = frames[:0]
	}
	framePool.Put(buf)
	return done
}

// ConnContext records a connection in its requests' context, so that an
// event stream may write to it directly (see pushSink); it is meant for
// http.Server.ConnContext.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

type connKey struct{}

// plainConn is a connection that passes what is written to it unchanged
// to another one, which PlainConn returns (the relay's connection limits
// and its protocol router are).
type plainConn interface {
	PlainConn() net.Conn
}

// streamConn returns the descriptor of the request's connection when an
// event stream may write to it directly: HTTP/1.x without TLS, on a
// connection recorded by ConnContext whose bytes reach a socket unchanged.
func streamConn(r *http.Request) syscall.RawConn {
	if !rawWriteSupported || r.ProtoMajor != 1 || r.TLS != nil {
		return nil
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	for c != nil {
		if p, ok := c.(plainConn); ok {
			c = p.PlainConn()
			continue
		}
		if _, ok := c.(*net.TCPConn); !ok {
			if _, ok := c.(*net.UnixConn); !ok {
				return nil
			}
		}
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			return nil
		}
		return rc
	}
	return nil
}

// pendingStream is a client stream that tells how many received messages
// wait to be read (server.LocalConn's streams do): RecvMsg takes that many
// without blocking.
type pendingStream interface {
	Pending() int
}

// maxBatchBytes bounds the frames written at once.
const maxBatchBytes = 256 << 10

// relayEvents writes the stream's messages as SSE frames, after prefix,
// until the stream ends or a write fails; msg is the first message,
// received already, and is reused for the next ones. Each message goes out
// with every other one already waiting on the stream, in one write and one
// flush, so that a subscriber costs one write per batch of events however
// fast they come.
func relayEvents(sw *sseWriter, stream grpc.ClientStream, msg proto.Message, prefix []byte) {
	pending, _ := stream.(pendingStream)
	buf := framePool.Get().(*[]byte)
	defer func() {
		if cap(*buf) > maxPooledFrame {
			*buf = nil
		}
		framePool.Put(buf)
	}()
	frames := append((*buf)[:0], prefix...)
	for {
		var err error
		if frames, err = appendMessageFrame(frames, msg); err != nil {
			return
		}
		if pending == nil || pending.Pending() == 0 || len(frames) >= maxBatchBytes {
			if err := sw.write(frames); err != nil {
				return
			}
			*buf = frames
			frames = frames[:0]
		}
		if err := stream.RecvMsg(msg); err != nil {
			if len(frames) > 0 {
				_ = sw.write(frames)
			}
			return
		}
	}
}

// isEventStream reports whether a route is one of the event streams
// (`/hooks/subscribe`, `/encounters/subscribe`, `/actor/subscribe`,
// `/scene/subscribe`), which have hand-written handlers.
func isEventStream(rt *route) bool {
	return rt.serverStreaming && strings.HasPrefix(rt.fullMethod, "/relay.v1.EventService/")
}

// serveSubscribe serves an event stream. Next to the usual parameters it
// reads the resume point from the `Last-Event-ID` header (what an
// EventSource sends when it reconnects; it wins over a `lastEventId`
// parameter) and a browser's stream ticket from the `ticket` query
// parameter. Streams are never compressed and have no write time-out. Web
// pages of other origins read them as they read every other route: when
// their origin is allowed (see cors.go).
func (g *gateway) serveSubscribe(w http.ResponseWriter, r *http.Request, rt *route) {
	var body []byte
	if r.Body != nil {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
		if err != nil {
			code, msg := bodyReadFailure(err)
			g.writeError(w, code, rt.operation, g.newRequestID(rt.operation), msg)
			return
		}
	}
	query := r.URL.Query()
	ticket := query.Get(wire.TicketParam)
	query.Del(wire.TicketParam)
	merged, err := mergeParams(rt.input, body, query)
	if err == nil {
		merged, err = withLastEventID(merged, r.Header.Get(wire.LastEventIDHeader))
	}
	if err != nil {
		var (
			fields map[string]json.RawMessage
			ctx    context.Context
		)
		fields, ctx = deferParamError(r.Context(), err.Error(), body, query)
		r = r.WithContext(ctx)
		merged = appendObject(nil, fields)
	}
	g.serveStream(w, r, rt, merged, ticket)
}

// withLastEventID sets the merged parameters' `lastEventId` from a
// `Last-Event-ID` header, when there is one.
func withLastEventID(params []byte, header string) ([]byte, error) {
	id := strings.TrimSpace(header)
	if id == "" {
		return params, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(params, &m); err != nil || m == nil {
		m = map[string]json.RawMessage{}
	}
	quoted, err := json.Marshal(id)
	if err != nil {
		return nil, err
	}
	m["lastEventId"] = quoted
	return json.Marshal(m)
}

// newRequest builds a request message from merged JSON parameters.
func newRequest(md protoreflect.MessageDescriptor, params []byte) (proto.Message, error) {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		return nil, err
	}
	msg := mt.New().Interface()
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(params, msg); err != nil {
		return nil, paramErrorf("Invalid parameters: %v", err)
	}
	return msg, nil
}

// newStreamResponse returns an empty response message of a route's RPC.
func newStreamResponse(rt *route) proto.Message {
	return rt.output.New().Interface()
}

func firstValue(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// eventCarrier is implemented by every event stream response: each holds one
// relayv1.Event.
type eventCarrier interface {
	GetEvent() *relayv1.Event
}

// sseWriter serialises the frames of one stream; the keepalive timer, the
// stream's handler and, for a pushed stream, the event hub's writer
// goroutines share it.
//
// Writes that may block (the handler's, the keepalive's) go through the
// http.ResponseWriter, one goroutine at a time: that goroutine is busy, and
// its mutex is not held while it writes. The hub's writers must never block:
// tryWrite writes straight to the connection's descriptor (raw) what its
// socket buffer takes at once. What it cannot write, or what comes while a
// goroutine is busy, waits in pending for the busy goroutine (or a new one)
// to write through the ResponseWriter, under the write-stall limit as any
// answer. Raw writes happen only while no goroutine is busy, and each busy
// turn ends with a flush, so net/http never holds bytes of the stream that
// a raw write could overtake.
type sseWriter struct {
	mu   sync.Mutex
	idle sync.Cond // signalled when busy is cleared
	w    http.ResponseWriter
	rc   *http.ResponseController
	// raw writes to the connection directly, when frames may be written
	// so, and rawBytes counts what it wrote, for the access line (rec);
	// cancel ends the stream when a write fails.
	raw      *rawWriter
	rawBytes int64
	rec      *observe.Record
	cancel   func()
	// busy is set while a goroutine writes through w; pending are the
	// bytes it writes next, and resume is called once they are out.
	busy    bool
	pending []byte
	resume  func()
	failed  error
	// wrote is set by every write, so the keepalive stays quiet while
	// events flow; stopped is set once nothing may be written any more;
	// timer runs the keepalive.
	wrote   bool
	stopped bool
	timer   *time.Timer

	// A detached stream (see detach.go): conn is the connection it took
	// over, which poll watches under token; gone tells the handler's side
	// that the connection ended; stall bounds how long pending bytes may
	// wait for the client (stallTimer), and watchingOut is set while the
	// poller reports writability; closeAfter is set once the stream
	// ended, and the connection closes as soon as pending is out
	// (connClosed); endErr is how it ended and ended completes the
	// request's access line; discarded counts what the client sent.
	detached    bool
	conn        net.Conn
	poll        *poller
	token       uint64
	gone        func()
	stall       time.Duration
	stallTimer  *time.Timer
	watchingOut bool
	closeAfter  bool
	connClosed  bool
	endErr      error
	ended       func(observe.DetachedEnd)
	discarded   int
}

// newSSEWriter returns the writer of a committed stream.
func newSSEWriter(w http.ResponseWriter) *sseWriter {
	s := &sseWriter{w: w, rc: http.NewResponseController(w)}
	s.idle.L = &s.mu
	return s
}

// write writes frames through the ResponseWriter, waiting for its turn;
// it may block as long as the client lets it.
func (s *sseWriter) write(frames []byte) error {
	s.mu.Lock()
	for s.busy {
		s.idle.Wait()
	}
	if s.failed != nil {
		err := s.failed
		s.mu.Unlock()
		return err
	}
	s.busy = true
	s.mu.Unlock()
	err := s.writeOut(frames)
	s.release(err, true)
	return err
}

// writeOut writes p through the ResponseWriter and flushes it; only the
// busy goroutine calls it.
func (s *sseWriter) writeOut(p []byte) error {
	if _, err := s.w.Write(p); err != nil {
		return err
	}
	return s.rc.Flush()
}

// release ends the busy goroutine's turn after a write that ended with
// err (wrote: it wrote events or a message): it first writes what waited
// in pending, then lets the others write, and calls resume.
func (s *sseWriter) release(err error, wrote bool) {
	s.mu.Lock()
	for err == nil && len(s.pending) > 0 {
		p := s.pending
		s.pending = nil
		s.mu.Unlock()
		err = s.writeOut(p)
		wrote = true
		s.mu.Lock()
	}
	s.fail(err)
	if err == nil && wrote {
		s.wrote = true
	}
	s.busy = false
	resume := s.resume
	s.resume = nil
	s.idle.Broadcast()
	s.mu.Unlock()
	if resume != nil {
		resume()
	}
}

// fail records a failed write and ends the stream; the caller holds mu.
func (s *sseWriter) fail(err error) {
	if err == nil || s.failed != nil {
		return
	}
	s.failed = err
	s.pending = nil
	if s.cancel != nil {
		s.cancel()
	}
	if s.detached {
		s.detachedFailed()
	}
}

// tryWrite writes frames without blocking, for the event hub's writers
// (see server.EventFrameWriter): straight to the connection what its
// socket buffer takes, and it returns true; or, when the buffer is full
// or another goroutine is writing, it keeps the rest for a goroutine that
// may block, which calls resume once it is out, and returns false. After a
// failure or the stream's end, frames are dropped.
func (s *sseWriter) tryWrite(frames []byte, resume func()) bool {
	s.mu.Lock()
	if s.failed != nil || s.stopped {
		s.mu.Unlock()
		return true
	}
	if s.busy || s.detached && len(s.pending) > 0 {
		s.pending = append(s.pending, frames...)
		s.resume = resume
		s.mu.Unlock()
		return false
	}
	n, err := s.raw.write(frames)
	s.rawBytes += int64(n)
	if err != nil {
		s.fail(err)
		s.mu.Unlock()
		return true
	}
	s.wrote = true
	if n == len(frames) {
		s.mu.Unlock()
		return true
	}
	// The client reads slower than events come: the rest goes out from a
	// goroutine of its own, as slowly as the client takes it.
	s.pending = append(s.pending, frames[n:]...)
	s.resume = resume
	if s.detached {
		// The poller reports when the connection takes more.
		s.waitWritable()
		s.mu.Unlock()
		return false
	}
	s.busy = true
	s.mu.Unlock()
	go s.release(nil, true)
	return false
}

// keepalive writes a comment every interval in which nothing else was
// written, until the returned stop is called; once stop returns, nothing
// more is written to the stream. It runs on a timer, with no goroutine of
// its own while it waits.
func (s *sseWriter) keepalive(every time.Duration) (stop func()) {
	// The timer is set under the lock its function takes first, so the
	// function always finds it.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(every, func() {
		s.mu.Lock()
		if s.stopped {
			s.mu.Unlock()
			return
		}
		quiet := !s.wrote && !s.busy && s.failed == nil
		s.wrote = false
		s.timer.Reset(every)
		if s.detached {
			if quiet && len(s.pending) == 0 {
				s.writeDetached([]byte(keepaliveComment))
			}
			s.mu.Unlock()
			return
		}
		if !quiet {
			s.mu.Unlock()
			return
		}
		s.busy = true
		s.mu.Unlock()
		s.release(s.writeOut([]byte(keepaliveComment)), false)
	})
	return s.stop
}

// keepaliveComment is written when a stream was quiet for a while.
const keepaliveComment = ": keepalive\n\n"

// writeDetached writes p to a detached stream's connection without
// blocking, keeping what it does not take; the caller holds mu and
// nothing is pending.
func (s *sseWriter) writeDetached(p []byte) {
	n, err := s.raw.write(p)
	s.rawBytes += int64(n)
	if err != nil {
		s.fail(err)
		return
	}
	if n < len(p) {
		s.pending = append(s.pending, p[n:]...)
		s.waitWritable()
	}
}

// stop waits for the goroutine writing, if any, then ends every write to
// the stream and its keepalive.
func (s *sseWriter) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.busy {
		s.idle.Wait()
	}
	if !s.stopped && s.rec != nil && s.rawBytes > 0 {
		s.rec.AddBytes(s.rawBytes)
	}
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
}

// maxPooledFrame bounds the frame buffers kept for reuse.
const maxPooledFrame = 64 << 10

// framePool recycles the buffers frames are built in.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// appendMessageFrame appends a stream message's SSE frame: `id:` (when its
// event has a sequence), `event:` and one line of `data:`. A message that
// is not an event is written whole as the data of a `message` event.
func appendMessageFrame(dst []byte, msg proto.Message) ([]byte, error) {
	var seq uint64
	var name string
	var data []byte
	if c, ok := msg.(eventCarrier); ok && c.GetEvent() != nil {
		e := c.GetEvent()
		seq, name = e.GetSequence(), e.GetName()
		if d := e.GetData(); d != nil {
			// The relay's payloads are raw Values, whose JSON is copied;
			// a Value tree is encoded.
			raw, err := jsonvalue.JSON(d)
			if err != nil {
				return nil, fmt.Errorf("event data: %w", err)
			}
			data = raw
		}
	} else {
		raw, err := appendMessage(nil, msg.ProtoReflect())
		if err != nil {
			return nil, err
		}
		data = raw
	}
	return appendEventFrame(dst, seq, name, data)
}

// appendEventFrame appends one event's SSE frame: `id:` (when it has a
// sequence number), `event:` (`message` when it has no name) and its JSON
// payload on one line of `data:` (`{}` when empty).
func appendEventFrame(dst []byte, seq uint64, name string, data []byte) ([]byte, error) {
	if seq > 0 {
		dst = append(dst, "id: "...)
		dst = strconv.AppendUint(dst, seq, 10)
		dst = append(dst, '\n')
	}
	if name == "" {
		name = "message"
	}
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	if len(data) == 0 {
		dst = append(dst, "{}"...)
	} else {
		var err error
		if dst, err = appendRawJSON(dst, data); err != nil {
			return nil, fmt.Errorf("event data: %w", err)
		}
	}
	return append(dst, "\n\n"...), nil
}
