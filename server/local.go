package server

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// LocalConn calls the server's methods inside the process, unary calls and
// streams alike, without serialising messages or crossing an HTTP/2
// transport: it is the one connection through which the gateway's REST and
// SSE calls reach the services. A call still runs the whole interceptor
// chain (the very same chain as the network server's) with the same
// metadata, method name and context (deadline and cancellation included)
// as a network call, and returns the same status errors, header and
// trailer, so the gateway cannot tell the difference except in speed.
//
// Messages are handed over, not copied: a unary request is given to the
// handler as it is and the handler's response is moved into the caller's
// reply; a stream's message is moved into the receiver's message. As
// grpc-go's contract already asks of every caller, a message must not be
// changed once sent (the gateway builds a fresh message for every call and
// every chunk, and so do the services), so neither side shares memory that
// the other changes.
//
// It does not bound the size of requests: the gateway bounds each REST body
// in the encoding the caller sent (--max-body-bytes, the same limit as a
// gRPC caller's message), and the same parameters as a protobuf message
// may be larger (a JSON 1 is a 9-byte double), so a second bound here
// would refuse requests within the limit; an upload's chunks are the
// gateway's own, and the upload limit bounds the file.
type LocalConn struct {
	interceptor grpc.UnaryServerInterceptor
	stream      grpc.StreamServerInterceptor

	mu      sync.RWMutex
	methods map[string]localMethod       // by full method name, "/pkg.Service/Method"
	streams map[string]localStreamMethod // the same, for streaming methods
}

type localMethod struct {
	impl    any
	handler grpc.MethodHandler
}

type localStreamMethod struct {
	impl any
	desc grpc.StreamDesc
}

var (
	_ grpc.ClientConnInterface = (*LocalConn)(nil)
	_ grpc.ServiceRegistrar    = (*LocalConn)(nil)
)

// newLocalConn returns a LocalConn that runs unary around every unary call
// and stream around every stream.
func newLocalConn(unary grpc.UnaryServerInterceptor, stream grpc.StreamServerInterceptor) *LocalConn {
	return &LocalConn{
		interceptor: unary,
		stream:      stream,
		methods:     map[string]localMethod{},
		streams:     map[string]localStreamMethod{},
	}
}

// RegisterService records a service's methods; it implements
// grpc.ServiceRegistrar.
func (c *LocalConn) RegisterService(desc *grpc.ServiceDesc, impl any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range desc.Methods {
		c.methods["/"+desc.ServiceName+"/"+m.MethodName] = localMethod{impl: impl, handler: m.Handler}
	}
	for _, sd := range desc.Streams {
		c.streams["/"+desc.ServiceName+"/"+sd.StreamName] = localStreamMethod{impl: impl, desc: sd}
	}
}

// Invoke runs a unary method in the process.
func (c *LocalConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	c.mu.RLock()
	m, ok := c.methods[method]
	c.mu.RUnlock()
	if !ok {
		return status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	req, ok := args.(proto.Message)
	if !ok {
		return status.Errorf(codes.Internal, "local call %s: request %T is not a protobuf message", method, args)
	}
	// The server sees the caller's outgoing metadata as incoming, as it
	// would after the network hop, and none of it as outgoing.
	// FromOutgoingContext already returns a copy of its own.
	ctx = incoming(ctx)
	stream := &localStream{method: method}
	ctx = grpc.NewContextWithServerTransportStream(ctx, stream)

	decode := func(v any) error {
		dst, ok := v.(proto.Message)
		if !ok || dst.ProtoReflect().Descriptor() != req.ProtoReflect().Descriptor() {
			return status.Errorf(codes.Internal, "local call %s: request %T does not match %T", method, args, v)
		}
		moveFields(dst, req)
		return nil
	}
	resp, err := m.handler(m.impl, ctx, decode, c.interceptor)
	header, trailer := stream.metadata()
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			*o.HeaderAddr = header
		case grpc.TrailerCallOption:
			*o.TrailerAddr = trailer
		}
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return err
		}
		return status.FromContextError(err).Err()
	}
	out, ok := resp.(proto.Message)
	dst, ok2 := reply.(proto.Message)
	if !ok || !ok2 || out.ProtoReflect().Descriptor() != dst.ProtoReflect().Descriptor() {
		return status.Errorf(codes.Internal, "local call %s: response %T does not fit %T", method, resp, reply)
	}
	moveFields(dst, out)
	return nil
}

// incoming turns a caller's context into the server's: the caller's
// outgoing metadata becomes incoming, as it would after the network hop,
// and none of it stays outgoing. FromOutgoingContext already returns a copy
// of its own.
func incoming(ctx context.Context) context.Context {
	md, _ := metadata.FromOutgoingContext(ctx)
	return metadata.NewIncomingContext(metadata.NewOutgoingContext(ctx, nil), md)
}

// moveFields sets every populated field of src on dst, sharing values
// rather than copying them; dst is reset first.
//
// Messages generated by protoc-gen-go (every message of the relay's
// services) are moved field by field with Go's reflection, which shares
// the values as protoreflect's Set does, but without boxing each scalar
// in a protoreflect.Value: through protoreflect a string field cost four
// allocations, a good share of a small call's. Any other message goes
// through protoreflect.
func moveFields(dst, src proto.Message) {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() == sv.Type() && dv.Kind() == reflect.Pointer && !dv.IsNil() && !sv.IsNil() {
		if dv.Pointer() == sv.Pointer() {
			return
		}
		if fields, ok := generatedFields(dv.Type().Elem()); ok {
			proto.Reset(dst)
			d, s := dv.Elem(), sv.Elem()
			for _, i := range fields {
				d.Field(i).Set(s.Field(i))
			}
			return
		}
	}
	d := dst.ProtoReflect()
	proto.Reset(dst)
	src.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		d.Set(fd, v)
		return true
	})
}

// messageFields caches generatedFields' answers by struct type.
var messageFields sync.Map // reflect.Type → []int, or nil when not generated

// generatedFields returns the indexes of the protobuf fields of a message
// struct generated by protoc-gen-go with the open struct API: each
// exported field carries a protobuf or protobuf_oneof tag, and the only
// unexported ones are the message's state, size cache and unknown fields
// (which a move leaves behind, as protoreflect's Range does). It reports
// false for any other struct (extension fields, a hand-written message),
// which is then moved through protoreflect.
func generatedFields(t reflect.Type) ([]int, bool) {
	if v, ok := messageFields.Load(t); ok {
		fields := v.([]int)
		return fields, fields != nil
	}
	var fields []int
	generated := t.Kind() == reflect.Struct
	for i := 0; generated && i < t.NumField(); i++ {
		f := t.Field(i)
		switch {
		case f.IsExported() && (f.Tag.Get("protobuf") != "" || f.Tag.Get("protobuf_oneof") != ""):
			fields = append(fields, i)
		case !f.IsExported() && (f.Name == "state" || f.Name == "sizeCache" || f.Name == "unknownFields"):
		default:
			generated = false
		}
	}
	if !generated {
		fields = nil
	} else if fields == nil {
		fields = []int{}
	}
	messageFields.Store(t, fields)
	return fields, generated
}

// chainUnary folds interceptors into one, the first outermost (what
// grpc.ChainUnaryInterceptor does, but usable outside a grpc.Server).
func chainUnary(interceptors []grpc.UnaryServerInterceptor) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return callChain(interceptors, 0, ctx, req, info, handler)
	}
}

func callChain(interceptors []grpc.UnaryServerInterceptor, i int, ctx context.Context, req any, info *grpc.UnaryServerInfo, final grpc.UnaryHandler) (any, error) {
	if i == len(interceptors) {
		return final(ctx, req)
	}
	return interceptors[i](ctx, req, info, func(ctx context.Context, req any) (any, error) {
		return callChain(interceptors, i+1, ctx, req, info, final)
	})
}

// localStream is the grpc.ServerTransportStream of a local call: it keeps
// the header and trailer the handler sets, for the caller's Header and
// Trailer call options.
type localStream struct {
	method string

	mu      sync.Mutex
	header  metadata.MD
	trailer metadata.MD
	sent    bool
}

func (s *localStream) Method() string { return s.method }

func (s *localStream) SetHeader(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sent {
		return fmt.Errorf("local call %s: header already sent", s.method)
	}
	s.header = joinMD(s.header, md)
	return nil
}

func (s *localStream) SendHeader(md metadata.MD) error {
	if err := s.SetHeader(md); err != nil {
		return err
	}
	s.mu.Lock()
	s.sent = true
	s.mu.Unlock()
	return nil
}

func (s *localStream) SetTrailer(md metadata.MD) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.trailer = joinMD(s.trailer, md)
	return nil
}

// joinMD adds md to to: md itself when to is empty (metadata handed to a
// stream is not changed afterwards; the request id's is set as header
// and trailer on every call, and copying it was a tenth of a read's
// allocated bytes), else a joined copy.
func joinMD(to, md metadata.MD) metadata.MD {
	if len(to) == 0 {
		return md
	}
	return metadata.Join(to, md)
}

func (s *localStream) metadata() (header, trailer metadata.MD) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.header == nil {
		s.header = metadata.MD{}
	}
	if s.trailer == nil {
		s.trailer = metadata.MD{}
	}
	return s.header, s.trailer
}
