package server

import (
	"context"
	"errors"
	"strings"
	"testing"

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
