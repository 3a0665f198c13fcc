package server

import (
	"context"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// echoDesc is a one-method service for LocalConn's tests: it answers the
// request's value with the caller's "x-test" metadata appended, sets a
// header and a trailer, and fails on request.
var echoDesc = &grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) {
				v := req.(*wrapperspb.StringValue).GetValue()
				switch v {
				case "fail":
					return nil, status.Error(codes.NotFound, "no such thing")
				case "plain":
					return nil, errors.New("not a status")
				case "cancelled":
					return nil, context.Canceled
				}
				md, _ := metadata.FromIncomingContext(ctx)
				if out, ok := metadata.FromOutgoingContext(ctx); ok && len(out) > 0 {
					return nil, status.Error(codes.Internal, "the caller's outgoing metadata leaked into the server")
				}
				if err := grpc.SetHeader(ctx, metadata.Pairs("h", "1")); err != nil {
					return nil, err
				}
				if err := grpc.SetTrailer(ctx, metadata.Pairs("t", "2")); err != nil {
					return nil, err
				}
				if m, ok := grpc.Method(ctx); !ok || m != "/test.Echo/Echo" {
					return nil, status.Errorf(codes.Internal, "method %q", m)
				}
				return wrapperspb.String(v + ":" + strings.Join(md.Get("x-test"), ",")), nil
			}
			if interceptor == nil {
				return handler(ctx, in)
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/Echo"}, handler)
		},
	}},
}

func TestLocalConnInvoke(t *testing.T) {
	var order []string
	trace := func(name string) grpc.UnaryServerInterceptor {
		return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
			order = append(order, name+" "+info.FullMethod)
			return handler(ctx, req)
		}
	}
	c := newLocalConn(chainUnary([]grpc.UnaryServerInterceptor{trace("outer"), trace("inner")}), nil)
	c.RegisterService(echoDesc, struct{}{})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-test", "abc")

	var header, trailer metadata.MD
	reply := new(wrapperspb.StringValue)
	if err := c.Invoke(ctx, "/test.Echo/Echo", wrapperspb.String("hi"), reply, grpc.Header(&header), grpc.Trailer(&trailer)); err != nil {
		t.Fatal(err)
	}
	if reply.GetValue() != "hi:abc" {
		t.Errorf("reply %q, want hi:abc (the caller's metadata reaches the server as incoming)", reply.GetValue())
	}
	if got := header.Get("h"); len(got) != 1 || got[0] != "1" {
		t.Errorf("header %v, want h=1", header)
	}
	if got := trailer.Get("t"); len(got) != 1 || got[0] != "2" {
		t.Errorf("trailer %v, want t=2", trailer)
	}
	if want := []string{"outer /test.Echo/Echo", "inner /test.Echo/Echo"}; strings.Join(order, "|") != strings.Join(want, "|") {
		t.Errorf("interceptors ran as %v, want %v", order, want)
	}
}

func TestLocalConnErrors(t *testing.T) {
	c := newLocalConn(nil, nil)
	c.RegisterService(echoDesc, struct{}{})
	ctx := context.Background()
	for _, tc := range []struct {
		method, value string
		want          codes.Code
	}{
		{"/test.Echo/Echo", "fail", codes.NotFound},
		{"/test.Echo/Echo", "plain", codes.Unknown},
		{"/test.Echo/Echo", "cancelled", codes.Canceled},
		{"/test.Echo/Missing", "hi", codes.Unimplemented},
	} {
		err := c.Invoke(ctx, tc.method, wrapperspb.String(tc.value), new(wrapperspb.StringValue))
		if got := status.Code(err); got != tc.want {
			t.Errorf("%s(%.10q): code %v (%v), want %v", tc.method, tc.value, got, err, tc.want)
		}
	}
	if err := c.Invoke(ctx, "/test.Echo/Echo", wrapperspb.String("hi"), new(wrapperspb.Int32Value)); status.Code(err) != codes.Internal {
		t.Errorf("a reply of the wrong type: %v, want Internal", err)
	}
	if _, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Echo/Echo"); status.Code(err) != codes.Unimplemented {
		t.Errorf("NewStream: %v, want Unimplemented", err)
	}
}

// chatDesc is a streaming service for LocalConn's tests. Chat answers each
// message with the message and "!", after setting a header and a trailer;
// "fail" ends it with NotFound, "wait" makes it wait for the caller to go
// away. Burst sends the number of messages asked for, then reports on
// sent.
var (
	chatWaiting = make(chan struct{}, 1)
	chatEnded   = make(chan error, 1)
	chatSent    = make(chan int, 1)
	chatDesc    = &grpc.ServiceDesc{
		ServiceName: "test.Chat",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Chat",
			ServerStreams: true,
			ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				md, _ := metadata.FromIncomingContext(ss.Context())
				if err := grpc.SetHeader(ss.Context(), metadata.Pairs("h", strings.Join(md.Get("x-test"), ","))); err != nil {
					return err
				}
				ss.SetTrailer(metadata.Pairs("t", "2"))
				for {
					in := new(wrapperspb.StringValue)
					if err := ss.RecvMsg(in); err != nil {
						if errors.Is(err, io.EOF) {
							return nil
						}
						return err
					}
					switch in.GetValue() {
					case "fail":
						return status.Error(codes.NotFound, "no such thing")
					case "wait":
						chatWaiting <- struct{}{}
						<-ss.Context().Done()
						chatEnded <- ss.Context().Err()
						return ss.Context().Err()
					}
					if err := ss.SendMsg(wrapperspb.String(in.GetValue() + "!")); err != nil {
						return err
					}
				}
			},
		}, {
			// Join answers the messages it was sent, joined, once the
			// caller closed its side; it sets its trailer only after the
			// answer, a moment later.
			StreamName:    "Join",
			ClientStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := grpc.SetHeader(ss.Context(), metadata.Pairs("h", "1")); err != nil {
					return err
				}
				var parts []string
				for {
					in := new(wrapperspb.StringValue)
					err := ss.RecvMsg(in)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						return err
					}
					parts = append(parts, in.GetValue())
				}
				if err := ss.SendMsg(wrapperspb.String(strings.Join(parts, "+"))); err != nil {
					return err
				}
				time.Sleep(50 * time.Millisecond)
				ss.SetTrailer(metadata.Pairs("t", strconv.Itoa(len(parts))))
				return nil
			},
		}, {
			StreamName:    "Burst",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.Int32Value)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				n := 0
				defer func() { chatSent <- n }()
				for range in.GetValue() {
					if err := ss.SendMsg(wrapperspb.Int32(int32(n))); err != nil {
						return err
					}
					n++
				}
				return nil
			},
		}},
	}
)

// TestLocalConnStream: a stream runs the stream interceptors, sees the
// caller's metadata as incoming, passes messages both ways in order, and
// ends with the handler's status after every message it sent, header and
// trailer included.
func TestLocalConnStream(t *testing.T) {
	var order []string
	trace := func(name string) grpc.StreamServerInterceptor {
		return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
			order = append(order, name+" "+info.FullMethod)
			return handler(srv, ss)
		}
	}
	c := newLocalConn(nil, chainStream([]grpc.StreamServerInterceptor{trace("outer"), trace("inner")}))
	c.RegisterService(chatDesc, struct{}{})
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), "x-test", "abc"))
	defer cancel()
	desc := &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

	var header, trailer metadata.MD
	s, err := c.NewStream(ctx, desc, "/test.Chat/Chat", grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b"} {
		if err := s.SendMsg(wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a!", "b!"} {
		got := new(wrapperspb.StringValue)
		if err := s.RecvMsg(got); err != nil || got.GetValue() != want {
			t.Fatalf("received %q, %v; want %q", got.GetValue(), err, want)
		}
	}
	if h, err := s.Header(); err != nil || h.Get("h")[0] != "abc" {
		t.Fatalf("header %v, %v: want the caller's metadata echoed", h, err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); !errors.Is(err, io.EOF) {
		t.Fatalf("after CloseSend: %v, want io.EOF", err)
	}
	if s.Trailer().Get("t")[0] != "2" || header.Get("h")[0] != "abc" || trailer.Get("t")[0] != "2" {
		t.Fatalf("trailer %v, call options %v %v", s.Trailer(), header, trailer)
	}
	if want := []string{"outer /test.Chat/Chat", "inner /test.Chat/Chat"}; strings.Join(order, ";") != strings.Join(want, ";") {
		t.Fatalf("interceptors ran %v, want %v", order, want)
	}

	// A failing handler: the messages it sent first, then its status.
	s, _ = c.NewStream(ctx, desc, "/test.Chat/Chat")
	_ = s.SendMsg(wrapperspb.String("a"))
	_ = s.SendMsg(wrapperspb.String("fail"))
	if err := s.RecvMsg(new(wrapperspb.StringValue)); err != nil {
		t.Fatal(err)
	}
	if err := s.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.NotFound {
		t.Fatalf("after fail: %v, want NotFound", err)
	}
	// Messages after the handler returned fill the window, then get
	// io.EOF: the caller never waits for a handler that is gone.
	err = nil
	for i := 0; i <= localWindow && err == nil; i++ {
		err = s.SendMsg(wrapperspb.String("late"))
	}
	if !errors.Is(err, io.EOF) {
		t.Fatalf("messages after the handler returned: %v, want io.EOF once the window is full", err)
	}
}

// TestLocalConnClientStreamEndsWithItsAnswer: on a client-streaming
// method, as over the network, the answer is received once the handler
// ended, so the header and trailer it set are there with it, even those
// set after the answer was sent.
func TestLocalConnClientStreamEndsWithItsAnswer(t *testing.T) {
	c := newLocalConn(nil, nil)
	c.RegisterService(chatDesc, struct{}{})
	var header, trailer metadata.MD
	s, err := c.NewStream(context.Background(), &grpc.StreamDesc{ClientStreams: true}, "/test.Chat/Join", grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"a", "b", "c"} {
		if err := s.SendMsg(wrapperspb.String(v)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	got := new(wrapperspb.StringValue)
	if err := s.RecvMsg(got); err != nil {
		t.Fatal(err)
	}
	if got.GetValue() != "a+b+c" {
		t.Errorf("answer %q", got.GetValue())
	}
	if h, tr := header.Get("h"), s.Trailer().Get("t"); len(h) != 1 || h[0] != "1" || len(tr) != 1 || tr[0] != "3" {
		t.Errorf("with the answer: header %v, trailer %v", header, s.Trailer())
	}
	if tr := trailer.Get("t"); len(tr) != 1 || tr[0] != "3" {
		t.Errorf("the trailer option holds %v", trailer)
	}
}

// TestLocalConnStreamCancel: the caller going away ends the handler.
func TestLocalConnStreamCancel(t *testing.T) {
	c := newLocalConn(nil, nil)
	c.RegisterService(chatDesc, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/test.Chat/Chat")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wrapperspb.String("wait")); err != nil {
		t.Fatal(err)
	}
	within(t, chatWaiting)
	cancel()
	if err := s.RecvMsg(new(wrapperspb.StringValue)); status.Code(err) != codes.Canceled {
		t.Fatalf("after cancel: %v, want Canceled", err)
	}
	if err := within(t, chatEnded); !errors.Is(err, context.Canceled) {
		t.Fatalf("the handler saw %v, want context.Canceled", err)
	}
}

// TestLocalConnStreamWindow: a handler runs at most localWindow messages
// ahead of its reader, and the reader learns how many wait.
func TestLocalConnStreamWindow(t *testing.T) {
	c := newLocalConn(nil, nil)
	c.RegisterService(chatDesc, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func(n int32) grpc.ClientStream {
		s, err := c.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/test.Chat/Burst")
		if err == nil {
			err = s.SendMsg(wrapperspb.Int32(n))
		}
		if err == nil {
			err = s.CloseSend()
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Three messages fit in the window: the handler sends them all and
	// returns before anything is read.
	s := open(3)
	if n := within(t, chatSent); n != 3 {
		t.Fatalf("sent %d, want 3", n)
	}
	if p := s.(interface{ Pending() int }).Pending(); p != 3 {
		t.Fatalf("pending %d, want 3", p)
	}
	for i := range 3 {
		got := new(wrapperspb.Int32Value)
		if err := s.RecvMsg(got); err != nil || got.GetValue() != int32(i) {
			t.Fatalf("message %d: %v, %v", i, got, err)
		}
	}
	if err := s.RecvMsg(new(wrapperspb.Int32Value)); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want io.EOF", err)
	}

	// More than the window: the handler waits for the reader, and ends
	// when the reader goes away.
	ctx2, cancel2 := context.WithCancel(ctx)
	s, err := c.NewStream(ctx2, &grpc.StreamDesc{ServerStreams: true}, "/test.Chat/Burst")
	if err != nil {
		t.Fatal(err)
	}
	_ = s.SendMsg(wrapperspb.Int32(localWindow * 4))
	_ = s.CloseSend()
	select {
	case n := <-chatSent:
		t.Fatalf("the handler sent all %d messages to a reader that read none", n)
	case <-time.After(50 * time.Millisecond):
	}
	if p := s.(interface{ Pending() int }).Pending(); p != localWindow {
		t.Fatalf("pending %d, want the window, %d", p, localWindow)
	}
	cancel2()
	if n := within(t, chatSent); n != localWindow {
		t.Fatalf("the handler sent %d before its reader went away, want %d", n, localWindow)
	}
}

// within receives from ch, failing the test if nothing comes for a long
// while (a hang, not a slow machine).
func within[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing came for 10s")
		panic("unreachable")
	}
}

// TestLocalConnStreamRefused: a stream an interceptor refuses before its
// handler runs still takes the caller's request, and RecvMsg reports the
// refusal, however the two goroutines interleave.
func TestLocalConnStreamRefused(t *testing.T) {
	refuse := func(any, grpc.ServerStream, *grpc.StreamServerInfo, grpc.StreamHandler) error {
		return status.Error(codes.PermissionDenied, "not you")
	}
	c := newLocalConn(nil, refuse)
	c.RegisterService(chatDesc, struct{}{})
	for range 200 {
		s, err := c.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, "/test.Chat/Burst")
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(wrapperspb.Int32(1)); err != nil {
			t.Fatalf("the request of a refused stream: %v, want it taken", err)
		}
		if err := s.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if err := s.RecvMsg(new(wrapperspb.Int32Value)); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a refused stream: %v, want PermissionDenied", err)
		}
	}
}
