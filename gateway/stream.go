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

	relayv1 "relay/gen/go/relay/v1"
)

// serveEvents bridges a server-streaming event RPC to Server-Sent Events.
//
// It calls the RPC through the gateway's client connection, so every
// interceptor runs, and waits for the stream's first message (the
// `connected` event every event stream sends at once) before committing to
// 200: a missing key, a missing scope or a bad parameter therefore answers
// with its real status and the usual error body. Then each message becomes a
// frame `id: <sequence>`, `event: <name>`, `data: <JSON>`, and a keepalive
// comment is written when nothing else was for a while. The stream ends when
// the caller goes away or the server ends it.
func (g *gateway) serveEvents(w http.ResponseWriter, r *http.Request, rt *route, params []byte) {
	g.serveStream(w, r, rt, params, "")
}

// serveStream is serveEvents with an optional stream ticket, forwarded as
// `x-stream-ticket` metadata for the server's authentication step.
func (g *gateway) serveStream(w http.ResponseWriter, r *http.Request, rt *route, params []byte, ticket string) {
	ctx, cancel := context.WithCancel(withInvalidParams(r.Context()))
	defer cancel()
	req, err := newRequest(rt.input, params)
	if err != nil {
		g.writeError(w, http.StatusBadRequest, rt.operation, g.newRequestID(rt.operation), err.Error())
		return
	}
	if key := r.Header.Get(apiKeyHeader); key != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
	}
	if ticket != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, streamTicketMetadata, ticket)
	}
	// Ask the RPC to hand its subscription over once connected (see
	// EventFeeds): the events then skip the in-process gRPC hop.
	if g.feeds != nil {
		ctx = metadata.AppendToOutgoingContext(ctx, g.feeds.HandoffKey(), g.feeds.Secret())
	}
	var header metadata.MD
	stream, err := g.conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, rt.fullMethod, grpc.Header(&header))
	if err == nil {
		err = stream.SendMsg(req)
	}
	if err == nil {
		err = stream.CloseSend()
	}
	first := newStreamResponse(rt)
	if err == nil {
		err = stream.RecvMsg(first)
	}
	requestID := firstValue(header, requestIDMetadata)
	if requestID == "" {
		requestID = firstValue(stream.Trailer(), requestIDMetadata)
	}
	if requestID == "" {
		requestID = g.newRequestID(rt.operation)
	}
	if err != nil {
		g.writeStatus(w, status.Convert(err), rt.operation, requestID)
		return
	}

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
	h.Set(requestIDHeader, requestID)
	w.WriteHeader(http.StatusOK)

	sw := &sseWriter{w: w, rc: http.NewResponseController(w)}
	// The server's write deadline must not cut a long stream.
	_ = sw.rc.SetWriteDeadline(time.Time{})
	if err := sw.write([]byte("retry: 3000\n\n")); err != nil {
		return
	}
	// The stream's header is in once its first message is.
	if received, err := stream.Header(); err == nil {
		header = metadata.Join(header, received)
	}
	if feed := g.claimFeed(header); feed != nil {
		defer feed.Release()
		// The RPC ends once its subscription is claimed: reading its end
		// releases the in-process stream at once.
		_ = stream.RecvMsg(newStreamResponse(rt))
		if err := sw.event(first); err != nil {
			return
		}
		g.serveFeed(ctx, sw, feed)
		return
	}
	stopKeepalive := sw.keepalive(ctx, g.keepaliveEvery)
	defer stopKeepalive()
	for msg := first; ; {
		if err := sw.event(msg); err != nil {
			return
		}
		msg = newStreamResponse(rt)
		if err := stream.RecvMsg(msg); err != nil {
			return
		}
	}
}

// streamTicketMetadata carries a stream ticket to the server, which accepts
// it on the event streams only.
const streamTicketMetadata = "x-stream-ticket"

// isEventStream reports whether a route is one of the event streams
// (`/hooks/subscribe`, `/encounters/subscribe`, `/actor/subscribe`,
// `/scene/subscribe`), which have hand-written handlers.
func isEventStream(rt *route) bool {
	return rt.serverStreaming && strings.HasPrefix(rt.fullMethod, "/relay.v1.EventService/")
}

// handleEventStreams registers the event streams' handlers on the mux,
// ahead of the generated ones (the mux tries the latest registration
// first).
func (g *gateway) handleEventStreams() error {
	for _, list := range g.routes.byMethod {
		for _, rt := range list {
			if !isEventStream(rt) {
				continue
			}
			err := g.mux.HandlePath(rt.httpMethod, "/"+strings.Join(rt.segments, "/"), func(w http.ResponseWriter, r *http.Request, _ map[string]string) {
				g.serveSubscribe(w, r, rt)
			})
			if err != nil {
				return fmt.Errorf("gateway: %w", err)
			}
		}
	}
	return nil
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
	ticket := query.Get("ticket")
	query.Del("ticket")
	merged, err := mergeParams(rt.input, body, query)
	if err == nil {
		merged, err = withLastEventID(merged, r.Header.Get("Last-Event-ID"))
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

// sseWriter serialises the frames of one stream; the keepalive goroutine and
// the event loop share it.
type sseWriter struct {
	mu sync.Mutex
	w  http.ResponseWriter
	rc *http.ResponseController
	// wrote is set by every write, so the keepalive stays quiet while
	// events flow.
	wrote bool
}

func (s *sseWriter) write(frame []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.w.Write(frame); err != nil {
		return err
	}
	s.wrote = true
	return s.rc.Flush()
}

// event writes one stream message as an SSE frame.
func (s *sseWriter) event(msg proto.Message) error {
	var ev FeedEvent
	if c, ok := msg.(eventCarrier); ok && c.GetEvent() != nil {
		e := c.GetEvent()
		ev = FeedEvent{Seq: e.GetSequence(), Name: e.GetName(), Data: e.GetData()}
	} else {
		raw, err := appendMessage(nil, msg.ProtoReflect())
		if err != nil {
			return err
		}
		ev.Data = raw
	}
	frame, err := appendCheckedFrame(nil, ev)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	return s.write(frame)
}

// keepalive writes a comment every interval in which nothing else was
// written, until ctx ends or the returned stop is called.
func (s *sseWriter) keepalive(ctx context.Context, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-done:
				return
			case <-t.C:
				s.mu.Lock()
				quiet := !s.wrote
				s.wrote = false
				s.mu.Unlock()
				if quiet {
					if err := s.write([]byte(": keepalive\n\n")); err != nil {
						return
					}
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// claimFeed takes over the subscription the event RPC handed over, if it
// did.
func (g *gateway) claimFeed(header metadata.MD) EventFeed {
	if g.feeds == nil {
		return nil
	}
	token := firstValue(header, g.feeds.HandoffKey())
	if token == "" {
		return nil
	}
	return g.feeds.Claim(token)
}

// serveFeed writes the events of a subscription the event RPC handed over
// (see EventFeeds): the backlog, then live events until the caller
// goes away, the subscriber overflows or the relay stops. Every batch of
// events waiting is written as consecutive frames with one write and one
// flush. A keepalive comment goes out every interval in which nothing else
// was written, from a ticker of the stream's own goroutine (no goroutine of
// its own).
func (g *gateway) serveFeed(ctx context.Context, sw *sseWriter, feed EventFeed) {
	buf := framePool.Get().(*[]byte)
	defer framePool.Put(buf)
	flush := func(frames []byte) error {
		*buf = frames[:0]
		err := sw.write(frames)
		if cap(frames) > maxPooledFrame {
			*buf = nil
		}
		return err
	}
	// The resume point after an overflow: the backlog's events are all
	// at or before it.
	last := feed.Last()
	frames := (*buf)[:0]
	for _, ev := range feed.Backlog() {
		frames = appendFeedFrame(frames, ev)
	}
	if len(frames) > 0 {
		if err := flush(frames); err != nil {
			return
		}
	}
	ticker := time.NewTicker(g.keepaliveEvery)
	defer ticker.Stop()
	var batch []FeedEvent
	for {
		var err error
		batch, err = feed.Next(ctx, ticker.C, batch)
		switch {
		case errors.Is(err, ErrFeedOverflow):
			_ = sw.write(appendFrame((*buf)[:0], feed.Overflow(last)))
			return
		case err != nil:
			return
		}
		if len(batch) == 0 {
			// The ticker fired: a keepalive unless events went out since
			// the last tick.
			sw.mu.Lock()
			quiet := !sw.wrote
			sw.wrote = false
			sw.mu.Unlock()
			if quiet {
				if err := sw.write([]byte(": keepalive\n\n")); err != nil {
					return
				}
			}
			continue
		}
		frames := (*buf)[:0]
		for _, ev := range batch {
			frames = appendFeedFrame(frames, ev)
		}
		if err := flush(frames); err != nil {
			return
		}
		last = batch[len(batch)-1].Seq
	}
}

// maxPooledFrame bounds the frame buffers kept for reuse.
const maxPooledFrame = 64 << 10

// framePool recycles the buffers frames are built in.
var framePool = sync.Pool{New: func() any { return new([]byte) }}

// appendFeedFrame appends a feed event's frame: its shared one when the feed
// built it, else one built here.
func appendFeedFrame(dst []byte, ev FeedEvent) []byte {
	if len(ev.Frame) > 0 {
		return append(dst, ev.Frame...)
	}
	return appendFrame(dst, ev)
}

// appendFrame appends an event's SSE frame: `id:` (when it has a
// sequence), `event:` and one line of `data:`. An unreadable payload
// becomes an empty object: a handed-over feed carries the hub's own JSON.
func appendFrame(dst []byte, ev FeedEvent) []byte {
	out, err := appendCheckedFrame(dst, ev)
	if err != nil {
		ev.Data = nil
		out, _ = appendCheckedFrame(dst, ev)
	}
	return out
}

// appendCheckedFrame is appendFrame that reports an unreadable payload
// instead of replacing it. appendRawJSON keeps the data on one line, as a
// frame needs; an empty payload is an empty object.
func appendCheckedFrame(dst []byte, ev FeedEvent) ([]byte, error) {
	if ev.Seq > 0 {
		dst = append(dst, "id: "...)
		dst = strconv.AppendUint(dst, ev.Seq, 10)
		dst = append(dst, '\n')
	}
	name := ev.Name
	if name == "" {
		name = "message"
	}
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	if len(ev.Data) == 0 {
		dst = append(dst, "{}"...)
	} else {
		var err error
		if dst, err = appendRawJSON(dst, ev.Data); err != nil {
			return nil, err
		}
	}
	return append(dst, "\n\n"...), nil
}
