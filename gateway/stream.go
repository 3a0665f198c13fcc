package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
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
	sink := &directSink{g: g, w: w, r: r, rt: rt}
	stream, err := g.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, rt.fullMethod, grpc.Header(&header), sink)
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
	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
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

	mu            sync.Mutex
	started       bool // the response is committed
	closed        bool // the bridge is done with the response
	failed        error
	sw            *sseWriter
	stopKeepalive func()
	buf           *[]byte // from framePool
	frames        []byte  // held frames, not written yet
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
	if len(d.frames) > 0 && d.failed == nil {
		_ = d.sw.write(d.frames)
	}
	d.stopKeepalive()
	if d.buf != nil {
		if cap(d.frames) > maxPooledFrame {
			*d.buf = nil
		} else {
			*d.buf = d.frames[:0]
		}
		framePool.Put(d.buf)
		d.buf, d.frames = nil, nil
	}
	return true
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

// sseWriter serialises the frames of one stream; the keepalive timer and
// the event loop share it.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	// wrote is set by every write, so the keepalive stays quiet while
	// events flow; stopped is set once the keepalive must write no more;
	// timer runs the keepalive.
	wrote   bool
	stopped bool
	timer   *time.Timer
}

func (s *sseWriter) write(frames []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writeLocked(frames)
}

func (s *sseWriter) writeLocked(frames []byte) error {
	if _, err := s.w.Write(frames); err != nil {
		return err
	}
	s.wrote = true
	return s.rc.Flush()
}

// keepalive writes a comment every interval in which nothing else was
// written, until the returned stop is called; once stop returns, it writes
// nothing more. It runs on a timer, with no goroutine of its own while it
// waits.
func (s *sseWriter) keepalive(every time.Duration) (stop func()) {
	// The timer is set under the lock its function takes first, so the
	// function always finds it.
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(every, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.stopped {
			return
		}
		if !s.wrote {
			if err := s.writeLocked([]byte(": keepalive\n\n")); err != nil {
				return
			}
		}
		s.wrote = false
		s.timer.Reset(every)
	})
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.stopped = true
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
