package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/wire"
)

// localWindow is how many messages a stream's sender may be ahead of its
// receiver before SendMsg waits: the in-process counterpart of HTTP/2 flow
// control. A slow reader of an event stream thus holds up only its own
// handler, whose subscription then overflows as it would over the network.
const localWindow = 8

// NewStream opens a stream in the process. The method's handler runs in a
// goroutine of its own behind the server's stream interceptors, as on the
// network server; messages travel between the two sides through bounded
// queues (see localWindow). The stream ends as a gRPC stream does: when the
// handler returns (its error is the status RecvMsg reports, after every
// message it sent), or when the caller's context ends. It implements
// grpc.ClientConnInterface.
func (c *LocalConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	c.mu.RLock()
	m, ok := c.streams[method]
	c.mu.RUnlock()
	if !ok {
		return nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	sctx, cancel := context.WithCancel(incoming(ctx))
	ss := &localServerStream{
		method: method,
		up:     make(chan proto.Message, localWindow),
		down:   make(chan proto.Message, localWindow),
		ready:  make(chan struct{}),
		cancel: cancel,
	}
	for _, o := range opts {
		if d, ok := o.(DirectSender); ok {
			ss.direct = d
		}
	}
	ss.ctx = grpc.NewContextWithServerTransportStream(sctx, localTransport{ss})
	cs := &localClientStream{ctx: ctx, server: ss, opts: opts, oneAnswer: !m.desc.ServerStreams}
	info := &grpc.StreamServerInfo{FullMethod: method, IsClientStream: m.desc.ClientStreams, IsServerStream: m.desc.ServerStreams}
	handler := func() error {
		if c.stream == nil {
			return m.desc.Handler(m.impl, ss)
		}
		return c.stream(m.impl, ss, info, m.desc.Handler)
	}
	if ss.direct != nil && !m.desc.ClientStreams {
		// The caller takes the messages in the handler's goroutine: let
		// that be its own, at its first RecvMsg, which would only wait for
		// the end otherwise; one goroutine less per open stream.
		cs.inline = func() { ss.run(handler) }
		return cs, nil
	}
	go ss.run(handler)
	return cs, nil
}

// chainStream folds stream interceptors into one, the first outermost (what
// grpc.ChainStreamInterceptor does, but usable outside a grpc.Server).
func chainStream(interceptors []grpc.StreamServerInterceptor) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		return callStreamChain(interceptors, 0, srv, ss, info, handler)
	}
}

func callStreamChain(interceptors []grpc.StreamServerInterceptor, i int, srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, final grpc.StreamHandler) error {
	if i == len(interceptors) {
		return final(srv, ss)
	}
	return interceptors[i](srv, ss, info, func(srv any, ss grpc.ServerStream) error {
		return callStreamChain(interceptors, i+1, srv, ss, info, final)
	})
}

// DirectSender is a call option of a local stream (it embeds
// grpc.EmptyCallOption, so a network connection ignores it) that takes the
// handler's messages in the handler's own goroutine, instead of queueing
// them for the caller's RecvMsg: a caller that writes each message out
// (the SSE bridge) then does so without a goroutine handoff per message,
// and its RecvMsg returns only when the stream ends. On a server-streaming
// method the handler then runs in the caller's goroutine, called by its
// first RecvMsg: the caller sends the request and CloseSend first.
// SendDirect gets the
// stream's header with the first message (nil with the others), and more
// when the handler said it has more messages to send at once (see
// HoldSends), so that it may write them together. Its error fails the
// handler's SendMsg with Canceled: the caller is gone.
type DirectSender interface {
	grpc.CallOption
	SendDirect(msg proto.Message, header metadata.MD, more bool) error
}

// EventFrameWriter is a DirectSender that can also write an event stream's
// live events from the event hub's writer goroutines, without a goroutine
// wake-up per event (the SSE bridge on an HTTP/1.1 connection it can write
// to without blocking). WriteEvents follows [world.EventWriter]: it must
// not block; it writes what the connection takes at once and returns
// true, or keeps the rest, finishes it in a goroutine of its own, calls
// resume and returns false. It must not keep evs. A stream whose
// DirectSender is one hands its subscription's live events to it when the
// world's subscriptions allow it ([world.EventPusher]), and otherwise
// sends them one by one as messages.
type EventFrameWriter interface {
	DirectSender
	WriteEvents(evs []wire.Event, resume func()) bool
}

// SendHolder is implemented by the transport stream of a local stream
// (grpc.ServerTransportStreamFromContext): a handler that knows it has
// more messages to send at once says so before each send, and a direct
// caller then writes them together.
type SendHolder interface {
	HoldSends(more bool)
}

// localServerStream is the server's side of a local stream.
type localServerStream struct {
	method string
	ctx    context.Context
	cancel context.CancelFunc
	// direct, when set, takes the handler's messages instead of down;
	// more is the handler's last HoldSends (used by its goroutine only).
	direct DirectSender
	more   bool

	// up carries the caller's messages to the handler and is closed by
	// CloseSend; down carries the handler's messages to the caller and is
	// closed once the handler returned and final is set.
	up, down chan proto.Message
	closeUp  sync.Once

	mu       sync.Mutex
	header   metadata.MD
	trailer  metadata.MD
	sentHdr  bool          // the header went out (SendHeader or the first message)
	ready    chan struct{} // closed when the header went out or the stream ended
	finished bool
	final    error // the stream's status, once finished
}

// run runs the handler and ends the stream with its outcome.
func (s *localServerStream) run(handler func() error) {
	err := handler()
	if err != nil {
		// As the network server does: a status stays, a context error
		// becomes its code, anything else is Unknown.
		if _, ok := status.FromError(err); !ok {
			if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				err = status.FromContextError(err).Err()
			} else {
				err = status.Error(codes.Unknown, err.Error())
			}
		}
	}
	s.mu.Lock()
	s.finished = true
	s.final = err
	if !s.sentHdr {
		s.sentHdr = true
		close(s.ready)
	}
	s.mu.Unlock()
	// The handler is done: whatever it held on the stream's context goes,
	// and a caller waiting to send is released (SendMsg), before the
	// caller can see the end.
	s.cancel()
	close(s.down)
}

func (s *localServerStream) Context() context.Context { return s.ctx }

func (s *localServerStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sentHdr {
		return fmt.Errorf("local stream %s: header already sent", s.method)
	}
	s.header = joinMD(s.header, md)
	return nil
}

func (s *localServerStream) SendHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sentHdr {
		return fmt.Errorf("local stream %s: header already sent", s.method)
	}
	s.header = joinMD(s.header, md)
	s.sentHdr = true
	close(s.ready)
	return nil
}

func (s *localServerStream) SetTrailer(md metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = joinMD(s.trailer, md)
}

// SendMsg hands a message to the caller, waiting while the caller is
// localWindow messages behind.
func (s *localServerStream) SendMsg(m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "local stream %s: message %T is not a protobuf message", s.method, m)
	}
	s.mu.Lock()
	if s.finished {
		s.mu.Unlock()
		return status.Errorf(codes.Internal, "local stream %s: message sent after the handler returned", s.method)
	}
	var first metadata.MD
	if !s.sentHdr {
		s.sentHdr = true
		close(s.ready)
		if first = s.header.Copy(); first == nil {
			first = metadata.MD{}
		}
	}
	s.mu.Unlock()
	if s.direct != nil {
		if err := s.ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		if err := s.direct.SendDirect(msg, first, s.more); err != nil {
			return status.Errorf(codes.Canceled, "local stream %s: the caller stopped taking messages: %v", s.method, err)
		}
		return nil
	}
	// Most sends find room at once: try that before the full select.
	select {
	case s.down <- msg:
		return nil
	default:
	}
	select {
	case s.down <- msg:
		return nil
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
}

// RecvMsg takes the caller's next message: io.EOF after CloseSend, the
// context's status once the caller went away.
func (s *localServerStream) RecvMsg(m any) error {
	if err := s.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	var (
		msg proto.Message
		ok  bool
	)
	select {
	case msg, ok = <-s.up:
		if !ok {
			return io.EOF
		}
	case <-s.ctx.Done():
		return status.FromContextError(s.ctx.Err()).Err()
	}
	return receive(s.method, m, msg)
}

// localTransport is a local stream's grpc.ServerTransportStream, for
// grpc.SetHeader and the like in its handler.
type localTransport struct{ s *localServerStream }

func (t localTransport) Method() string                  { return t.s.method }
func (t localTransport) SetHeader(md metadata.MD) error  { return t.s.SetHeader(md) }
func (t localTransport) SendHeader(md metadata.MD) error { return t.s.SendHeader(md) }
func (t localTransport) SetTrailer(md metadata.MD) error { t.s.SetTrailer(md); return nil }

// eventFrameWriter returns the stream's EventFrameWriter, if its caller
// gave one.
func (t localTransport) eventFrameWriter() EventFrameWriter {
	w, _ := t.s.direct.(EventFrameWriter)
	return w
}

// HoldSends implements SendHolder; it is called by the handler's goroutine
// only, as SendMsg is.
func (t localTransport) HoldSends(more bool) { t.s.more = more }

// receive moves a received message into the receiver's.
func receive(method string, dst any, src proto.Message) error {
	d, ok := dst.(proto.Message)
	if !ok || d.ProtoReflect().Descriptor() != src.ProtoReflect().Descriptor() {
		return status.Errorf(codes.Internal, "local stream %s: message %T does not fit %T", method, src, dst)
	}
	moveFields(d, src)
	return nil
}

// localClientStream is the caller's side of a local stream.
type localClientStream struct {
	ctx    context.Context
	server *localServerStream
	opts   []grpc.CallOption
	// inline, when set, runs the handler; the first RecvMsg calls it (a
	// server-streaming call with a DirectSender).
	inline func()
	// oneAnswer is set on a method whose handler sends one message (unary
	// or client-streaming): RecvMsg then returns only once the handler
	// ended, as grpc-go's does, so that the header and trailer are
	// complete when the answer arrives.
	oneAnswer bool

	finishOnce sync.Once
}

func (c *localClientStream) Context() context.Context { return c.ctx }

// Header waits for the stream's header: sent by the handler, or the one it
// had set when it ended without sending any.
func (c *localClientStream) Header() (metadata.MD, error) {
	select {
	case <-c.server.ready:
	case <-c.ctx.Done():
		return nil, status.FromContextError(c.ctx.Err()).Err()
	}
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	return c.server.header.Copy(), nil
}

// Trailer is the stream's trailer, once RecvMsg reported the stream's end.
func (c *localClientStream) Trailer() metadata.MD {
	c.server.mu.Lock()
	defer c.server.mu.Unlock()
	if !c.server.finished {
		return nil
	}
	return c.server.trailer.Copy()
}

// CloseSend tells the handler that no more messages come (io.EOF).
func (c *localClientStream) CloseSend() error {
	c.server.closeUp.Do(func() { close(c.server.up) })
	return nil
}

// SendMsg hands a message to the handler, waiting while it is localWindow
// messages behind. As over the network, a message that fits in the window
// is accepted even when the handler has just ended (it is then never
// read); one that would have to wait for an ended handler gets io.EOF, and
// RecvMsg tells how the stream ended.
func (c *localClientStream) SendMsg(m any) error {
	msg, ok := m.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "local stream %s: message %T is not a protobuf message", c.server.method, m)
	}
	if err := c.ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	select {
	case c.server.up <- msg:
		return nil
	default:
	}
	select {
	case c.server.up <- msg:
		return nil
	case <-c.server.ctx.Done():
		// The handler returned, or the caller went away.
		if err := c.ctx.Err(); err != nil {
			return status.FromContextError(err).Err()
		}
		return io.EOF
	case <-c.ctx.Done():
		return status.FromContextError(c.ctx.Err()).Err()
	}
}

// RecvMsg takes the handler's next message; after the last one it reports
// the stream's status (io.EOF for success).
func (c *localClientStream) RecvMsg(m any) error {
	if run := c.inline; run != nil {
		c.inline = nil
		run()
	}
	var (
		msg proto.Message
		ok  bool
	)
	// A message already waiting is taken without the full select.
	select {
	case msg, ok = <-c.server.down:
	default:
		select {
		case msg, ok = <-c.server.down:
		case <-c.ctx.Done():
			c.finish()
			return status.FromContextError(c.ctx.Err()).Err()
		}
	}
	if ok {
		if err := receive(c.server.method, m, msg); err != nil {
			return err
		}
		if c.oneAnswer {
			return c.awaitEnd()
		}
		return nil
	}
	c.server.mu.Lock()
	err := c.server.final
	c.server.mu.Unlock()
	if err == nil {
		err = io.EOF
	}
	c.finish()
	return err
}

// awaitEnd waits, after the one answer of a method that sends one, for
// the handler to end: then the stream's header and trailer are final and
// handed to the call options. A second message is a broken contract; the
// handler's failure after its answer is the call's error.
func (c *localClientStream) awaitEnd() error {
	select {
	case _, more := <-c.server.down:
		if more {
			c.finish()
			return status.Errorf(codes.Internal, "local stream %s: the handler sent more than one answer", c.server.method)
		}
	case <-c.ctx.Done():
		c.finish()
		return status.FromContextError(c.ctx.Err()).Err()
	}
	c.server.mu.Lock()
	err := c.server.final
	c.server.mu.Unlock()
	c.finish()
	return err
}

// Pending reports how many of the handler's messages wait to be received:
// RecvMsg takes that many without blocking. A caller may write them out
// together (the SSE bridge writes each batch of waiting events at once).
func (c *localClientStream) Pending() int { return len(c.server.down) }

// finish hands the header and trailer to the call's Header and Trailer
// options, once the stream ended, as grpc-go does.
func (c *localClientStream) finish() {
	c.finishOnce.Do(func() {
		c.server.mu.Lock()
		header, trailer := c.server.header.Copy(), c.server.trailer.Copy()
		c.server.mu.Unlock()
		if header == nil {
			header = metadata.MD{}
		}
		if trailer == nil {
			trailer = metadata.MD{}
		}
		for _, o := range c.opts {
			switch o := o.(type) {
			case grpc.HeaderCallOption:
				*o.HeaderAddr = header
			case grpc.TrailerCallOption:
				*o.TrailerAddr = trailer
			}
		}
	})
}
