package server

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// directDesc is a service whose handler sends the number of messages it
// is asked for, saying before each whether more follow at once, and
// reports what its last SendMsg returned.
var (
	directSendErr = make(chan error, 1)
	directDesc    = &grpc.ServiceDesc{
		ServiceName: "test.Direct",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName:    "Batch",
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				in := new(wrapperspb.Int32Value)
				if err := ss.RecvMsg(in); err != nil {
					return err
				}
				if err := grpc.SetHeader(ss.Context(), metadata.Pairs("h", "1")); err != nil {
					return err
				}
				holder, _ := grpc.ServerTransportStreamFromContext(ss.Context()).(SendHolder)
				if holder == nil {
					return status.Error(codes.Internal, "no SendHolder")
				}
				var err error
				for i := range in.GetValue() {
					holder.HoldSends(i < in.GetValue()-1)
					if err = ss.SendMsg(wrapperspb.Int32(i)); err != nil {
						break
					}
				}
				directSendErr <- err
				return err
			},
		}},
	}
)

// recordingSink is a DirectSender that records what it is given, failing
// from the failAt-th message on (never when 0).
type recordingSink struct {
	grpc.EmptyCallOption
	failAt int

	mu      sync.Mutex
	values  []int32
	more    []bool
	headers []metadata.MD
}

func (s *recordingSink) SendDirect(msg proto.Message, header metadata.MD, more bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failAt > 0 && len(s.values)+1 >= s.failAt {
		return errors.New("connection reset")
	}
	s.values = append(s.values, msg.(*wrapperspb.Int32Value).GetValue())
	s.more = append(s.more, more)
	s.headers = append(s.headers, header)
	return nil
}

// TestLocalConnDirectSends: with a DirectSender, a stream's messages go to
// it in order, the first with the stream's header, each with the handler's
// HoldSends, and none through RecvMsg, which reports the end; a sender
// that fails fails the handler's SendMsg with Canceled.
func TestLocalConnDirectSends(t *testing.T) {
	c := newLocalConn(nil, nil)
	c.RegisterService(directDesc, struct{}{})
	open := func(sink *recordingSink, n int32) error {
		t.Helper()
		s, err := c.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, "/test.Direct/Batch", sink)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.SendMsg(wrapperspb.Int32(n)); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseSend()
		return s.RecvMsg(new(wrapperspb.Int32Value))
	}

	sink := &recordingSink{}
	if err := open(sink, 4); !errors.Is(err, io.EOF) {
		t.Fatalf("RecvMsg = %v, want io.EOF: the messages go to the sink", err)
	}
	if err := <-directSendErr; err != nil {
		t.Fatalf("handler's SendMsg: %v", err)
	}
	wantValues, wantMore := []int32{0, 1, 2, 3}, []bool{true, true, true, false}
	for i := range wantValues {
		if i >= len(sink.values) || sink.values[i] != wantValues[i] || sink.more[i] != wantMore[i] {
			t.Fatalf("sink got values %v more %v, want %v %v", sink.values, sink.more, wantValues, wantMore)
		}
	}
	if got := sink.headers[0].Get("h"); len(got) != 1 || got[0] != "1" {
		t.Errorf("first message's header: %v", sink.headers[0])
	}
	for i, h := range sink.headers[1:] {
		if h != nil {
			t.Errorf("message %d came with a header: %v", i+1, h)
		}
	}

	failing := &recordingSink{failAt: 2}
	err := open(failing, 4)
	if status.Code(err) != codes.Canceled {
		t.Fatalf("stream status with a failing sender: %v, want Canceled", err)
	}
	if err := <-directSendErr; status.Code(err) != codes.Canceled {
		t.Fatalf("handler's SendMsg with a failing sender: %v, want Canceled", err)
	}
	if len(failing.values) != 1 {
		t.Fatalf("failing sink took %v", failing.values)
	}
}
