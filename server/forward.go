package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// Calls for worlds hosted by another relay node.
//
// In a cluster (package cluster) the registry resolves a world hosted by
// another node to a [RemoteWorld]. The edge node (the one the caller
// reached) runs its interceptors up to world resolution: the key is
// authenticated, its rate limit spent, its scope and its binding to the
// world checked. The chain's forward step then sends the call, with the
// resolved key and the request message as it was received, to the host,
// whose [Server.ServeForwarded] runs the rest of the very same chain
// (world, user and policy checks, the handler) with that key, without
// authenticating it again or spending its rate limit twice. The host's
// answer (response message or status with its details, header and
// trailer) comes back as it is, so that the caller cannot tell a
// forwarded call from a local one except by speed.
//
// Unary calls are forwarded, and so are file downloads (a server stream
// whose messages the host sends back one by one, see [StreamForwarder]).
// Any other stream for a remote world is refused with Unavailable naming
// the world and its host, unless the remote world serves streams itself
// ([StreamingRemote], for the event streams that follow a world's events
// across nodes).

// RemoteWorld is a world that another node hosts.
type RemoteWorld interface {
	world.World
	// Forward sends a call to the world's host and returns its answer. A
	// host that cannot be reached is an Unavailable status naming the
	// world.
	Forward(ctx context.Context, call *ForwardedCall) (*ForwardedReply, error)
}

// StreamingRemote is a [RemoteWorld] that serves the streaming method it
// accepts itself, without forwarding the stream: such a stream passes the
// rest of the chain on the edge node (its user is resolved through the
// remote world's UserDirectory).
type StreamingRemote interface {
	RemoteWorld
	ServesStream(method string) bool
}

// StreamForwarder is a [RemoteWorld] that forwards server streams: the
// host's messages are handed to send, in order, as they come; the reply
// holds the stream's final status.
type StreamForwarder interface {
	RemoteWorld
	ForwardStream(ctx context.Context, call *ForwardedCall, send func(msg []byte) error) (*ForwardedReply, error)
}

// UploadForwarder is a [RemoteWorld] that forwards client streams: the
// call's first message is in the call, next yields the others (io.EOF
// after the last), and the reply holds the response or the status.
type UploadForwarder interface {
	RemoteWorld
	ForwardUpload(ctx context.Context, call *ForwardedCall, next func() ([]byte, error)) (*ForwardedReply, error)
}

// forwardedStreams are the server streams forwarded to a world's host:
// those whose client sends one message and whose answer ends.
var forwardedStreams = map[string]bool{relayv1.FileService_DownloadFile_FullMethodName: true}

// eventStreams are the event streams: a node of a cluster with its event
// bus serves them for worlds hosted elsewhere itself ([StreamingRemote]).
var eventStreams = map[string]bool{
	relayv1.EventService_SubscribeHooks_FullMethodName:      true,
	relayv1.EventService_SubscribeEncounters_FullMethodName: true,
	relayv1.EventService_SubscribeActors_FullMethodName:     true,
	relayv1.EventService_SubscribeScenes_FullMethodName:     true,
}

// IsEventStream reports whether method (a full gRPC method name) is one
// of the event streams, which follow a world's events rather than ask its
// host.
func IsEventStream(method string) bool { return eventStreams[method] }

// forwardedWorldless are the calls that resolve no world in the chain but
// are about one world, whose host answers them: its handler forwards such
// a call itself (the removal of an embedded world).
var forwardedWorldless = map[string]bool{relayv1.WorldService_DeleteWorld_FullMethodName: true}

// forwardedUploads are the client streams forwarded to a world's host.
var forwardedUploads = map[string]bool{relayv1.FileService_UploadFile_FullMethodName: true}

// errStreamForwarded ends a stream's handler on the edge node once the
// host's answer was sent whole: the chain turns it into OK.
var errStreamForwarded = errors.New("stream answered by the host node")

// forwardStream is the stream chain's step after world resolution: a file
// download for a world another node hosts is forwarded there and answered
// with the host's messages; any other stream for such a world is refused.
func (c *Chain) forwardStream(ctx context.Context, call *Call, req any) error {
	remote, ok := call.World.(RemoteWorld)
	if !ok || call.forwarded {
		return nil
	}
	if s, ok := remote.(StreamingRemote); ok && s.ServesStream(call.Method) {
		return nil
	}
	if fwd, ok := remote.(StreamForwarder); ok && forwardedStreams[call.Method] && call.stream != nil {
		return c.forwardServerStream(ctx, call, fwd, req)
	}
	if fwd, ok := remote.(UploadForwarder); ok && forwardedUploads[call.Method] && call.stream != nil {
		return c.forwardUpload(ctx, call, fwd, req)
	}
	host := "another node"
	if h, ok := remote.(interface{ Host() string }); ok {
		host = "node " + h.Host()
	}
	return status.Errorf(codes.Unavailable, "World %s is hosted by %s, and this stream is not forwarded between nodes: call that node", remote.Info().ClientID, host)
}

// forwardServerStream sends a server stream's request to the host and its
// answer to the caller.
func (c *Chain) forwardServerStream(ctx context.Context, call *Call, fwd StreamForwarder, req any) error {
	fc, err := newForwardedCall(call, call.Method, fwd, req)
	if err != nil {
		return err
	}
	_, out, err := methodTypes(call.Method)
	if err != nil {
		return err
	}
	reply, err := fwd.ForwardStream(ctx, fc, func(b []byte) error {
		m := out.New().Interface()
		if err := proto.Unmarshal(b, m); err != nil {
			return status.Errorf(codes.Internal, "forward %s: bad message from the host: %v", call.Method, err)
		}
		return call.stream.SendMsg(m)
	})
	if err != nil {
		return err
	}
	if reply.Status != nil {
		if err := hostError(call.Method, reply.Status); err != nil {
			return err
		}
	}
	return errStreamForwarded
}

// forwardUpload sends a client stream's messages to the host as the
// caller sends them, and the host's response to the caller.
func (c *Chain) forwardUpload(ctx context.Context, call *Call, fwd UploadForwarder, req any) error {
	fc, err := newForwardedCall(call, call.Method, fwd, req)
	if err != nil {
		return err
	}
	withForwardedMetadata(ctx, fc)
	in, out, err := methodTypes(call.Method)
	if err != nil {
		return err
	}
	next := func() ([]byte, error) {
		m := in.New().Interface()
		// The call's own stream: the chain's steps ran on the first
		// message and have nothing to do with the others.
		if err := call.stream.RecvMsg(m); err != nil {
			return nil, err
		}
		return proto.Marshal(m)
	}
	reply, err := fwd.ForwardUpload(ctx, fc, next)
	if err != nil {
		return err
	}
	if hdr := withoutRequestID(reply.Header); len(hdr) > 0 {
		_ = call.stream.SetHeader(hdr)
		// The REST gateway reads an upload's answer metadata from its
		// trailer (see idempotency.go's uploads).
		call.stream.SetTrailer(hdr)
	}
	if tr := withoutRequestID(reply.Trailer); len(tr) > 0 {
		call.stream.SetTrailer(tr)
	}
	if reply.Status != nil {
		return hostError(call.Method, reply.Status)
	}
	resp := out.New().Interface()
	if err := proto.Unmarshal(reply.Response, resp); err != nil {
		return status.Errorf(codes.Internal, "forward %s: bad response from the host: %v", call.Method, err)
	}
	if err := call.stream.SendMsg(resp); err != nil {
		return err
	}
	return errStreamForwarded
}

// ServeForwardedUpload answers a client stream another node forwarded
// (a file upload): fc.Request is its first message, next yields the
// others (io.EOF after the last); the reply carries the response or the
// status.
func (s *Server) ServeForwardedUpload(ctx context.Context, fc *ForwardedCall, next func() ([]byte, error)) *ForwardedReply {
	if !forwardedUploads[fc.Method] || fc.ClientID == "" {
		return FailedReply(status.Errorf(codes.PermissionDenied, "Method %s is not forwarded between nodes", fc.Method))
	}
	in, out, err := methodTypes(fc.Method)
	if err != nil {
		return FailedReply(err)
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, forwardedKey{}, fc))
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.MD(fc.Metadata))
	cs, err := s.Local.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true}, fc.Method)
	if err != nil {
		return FailedReply(err)
	}
	body := fc.Request
	for {
		m := in.New().Interface()
		if err := proto.Unmarshal(body, m); err != nil {
			return FailedReply(status.Errorf(codes.InvalidArgument, "forwarded %s: bad message: %v", fc.Method, err))
		}
		if err := cs.SendMsg(m); err != nil {
			// The handler ended early (a refusal): its status is what
			// RecvMsg reports.
			break
		}
		if body, err = next(); err != nil {
			if !errors.Is(err, io.EOF) {
				return FailedReply(status.FromContextError(context.Canceled).Err())
			}
			break
		}
	}
	_ = cs.CloseSend()
	resp := out.New().Interface()
	if err := cs.RecvMsg(resp); err != nil {
		return FailedReply(err)
	}
	b, err := proto.Marshal(resp)
	if err != nil {
		return FailedReply(status.Errorf(codes.Internal, "forwarded %s: %v", fc.Method, err))
	}
	// The header and trailer the handler set (an answer given again for
	// its idempotency key says so there).
	hdr, _ := cs.Header()
	return &ForwardedReply{Response: b, Header: hdr, Trailer: cs.Trailer()}
}

// ServeForwardedStream answers a server stream another node forwarded
// (a file download), as ServeForwarded answers a unary call: the
// messages go to send as the handler sends them, and the reply carries
// the final status.
func (s *Server) ServeForwardedStream(ctx context.Context, fc *ForwardedCall, send func(msg []byte) error) *ForwardedReply {
	if !forwardedStreams[fc.Method] || fc.ClientID == "" {
		return FailedReply(status.Errorf(codes.PermissionDenied, "Method %s is not forwarded between nodes", fc.Method))
	}
	in, _, err := methodTypes(fc.Method)
	if err != nil {
		return FailedReply(err)
	}
	req := in.New().Interface()
	if err := proto.Unmarshal(fc.Request, req); err != nil {
		return FailedReply(status.Errorf(codes.InvalidArgument, "forwarded %s: bad request: %v", fc.Method, err))
	}
	ctx, cancel := context.WithCancel(context.WithValue(ctx, forwardedKey{}, fc))
	defer cancel()
	ctx = metadata.NewOutgoingContext(ctx, metadata.MD(fc.Metadata))
	cs, err := s.Local.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, fc.Method)
	if err != nil {
		return FailedReply(err)
	}
	if err := cs.SendMsg(req); err != nil {
		return FailedReply(err)
	}
	if err := cs.CloseSend(); err != nil {
		return FailedReply(err)
	}
	_, out, _ := methodTypes(fc.Method)
	for {
		m := out.New().Interface()
		err := cs.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			return &ForwardedReply{}
		}
		if err != nil {
			return FailedReply(err)
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return FailedReply(status.Errorf(codes.Internal, "forwarded %s: %v", fc.Method, err))
		}
		if err := send(b); err != nil {
			// The edge went away: the stream ends here.
			return FailedReply(status.FromContextError(context.Canceled).Err())
		}
	}
}

// ForwardedCall is a unary call sent to the node that hosts its world.
type ForwardedCall struct {
	// Method is the full gRPC method name.
	Method string
	// RequestID is the id the edge node issued; the host answers with it.
	RequestID string
	// ClientID is the world the edge resolved.
	ClientID string
	// Key is the caller's API key as the edge authenticated it.
	Key keys.Key
	// Metadata is the incoming metadata the host's chain reads (never the
	// API key or a ticket).
	Metadata map[string][]string
	// Request is the request message, in protobuf's binary form.
	Request []byte
}

// ForwardedReply is the host's answer to a [ForwardedCall].
type ForwardedReply struct {
	// Response is the response message in protobuf's binary form, when
	// Status is nil.
	Response []byte
	// Status is the call's failure as a google.rpc.Status in protobuf's
	// binary form (details included); nil for a success.
	Status []byte
	// Header and Trailer are the metadata the host's handler set.
	Header, Trailer map[string][]string
}

// forwardedMetadata lists the incoming metadata a forwarded call carries:
// what the chain after world resolution reads.
var forwardedMetadata = []string{wire.InvalidParamsHeader, wire.IdempotencyKeyHeader}

// forwardedKey is the context key of the [ForwardedCall] a host serves.
type forwardedKey struct{}

// forwardedFrom returns the forwarded call ctx serves, if any. Only
// ServeForwarded puts one there: no caller can claim to be forwarded.
func forwardedFrom(ctx context.Context) *ForwardedCall {
	fc, _ := ctx.Value(forwardedKey{}).(*ForwardedCall)
	return fc
}

// forward sends a unary call for a remote world to its host, which
// answers it (see unaryStepsForwarding).
func (c *Chain) forward(ctx context.Context, call *Call, remote RemoteWorld, req any, method string) (any, error) {
	fc, err := newForwardedCall(call, method, remote, req)
	if err != nil {
		return nil, err
	}
	withForwardedMetadata(ctx, fc)
	reply, err := remote.Forward(ctx, fc)
	if err != nil {
		return nil, err
	}
	if hdr := withoutRequestID(reply.Header); len(hdr) > 0 {
		_ = grpc.SetHeader(ctx, hdr)
	}
	if tr := withoutRequestID(reply.Trailer); len(tr) > 0 {
		_ = grpc.SetTrailer(ctx, tr)
	}
	if reply.Status != nil {
		return nil, hostError(method, reply.Status)
	}
	_, out, err := methodTypes(method)
	if err != nil {
		return nil, err
	}
	resp := out.New().Interface()
	if err := proto.Unmarshal(reply.Response, resp); err != nil {
		return nil, status.Errorf(codes.Internal, "forward %s: bad response from the host: %v", method, err)
	}
	return resp, nil
}

// withForwardedMetadata copies into fc the incoming metadata of ctx that
// the host's chain reads (forwardedMetadata).
func withForwardedMetadata(ctx context.Context, fc *ForwardedCall) {
	for _, name := range forwardedMetadata {
		if v := metadata.ValueFromIncomingContext(ctx, name); len(v) > 0 {
			if fc.Metadata == nil {
				fc.Metadata = map[string][]string{}
			}
			fc.Metadata[name] = v
		}
	}
}

// newForwardedCall is call's request req, for method, as the host of
// remote receives it, with the key the edge resolved.
func newForwardedCall(call *Call, method string, remote RemoteWorld, req any) (*ForwardedCall, error) {
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "forward %s: request %T is not a protobuf message", method, req)
	}
	body, err := proto.Marshal(msg)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "forward %s: %v", method, err)
	}
	return &ForwardedCall{Method: method, RequestID: call.RequestID, ClientID: remote.Info().ClientID, Key: call.Key, Request: body}, nil
}

// hostError is the error of a status the host answered with (a
// google.rpc.Status): nil for OK.
func hostError(method string, raw []byte) error {
	st := new(spb.Status)
	if err := proto.Unmarshal(raw, st); err != nil {
		return status.Errorf(codes.Internal, "forward %s: bad status from the host: %v", method, err)
	}
	return status.ErrorProto(st)
}

// withoutRequestID drops the request id from forwarded metadata: the edge
// already sent the same one.
func withoutRequestID(md map[string][]string) metadata.MD {
	out := metadata.MD{}
	for k, v := range md {
		if k != wire.RequestIDHeader {
			out[k] = v
		}
	}
	return out
}

// ServeForwarded answers a call another node forwarded for a world this
// node hosts: it runs the interceptor chain and the handler as for a
// local call, with the key the edge authenticated (no second
// authentication, no second rate limit), and returns the answer for the
// edge to send. ctx bounds the call.
func (s *Server) ServeForwarded(ctx context.Context, fc *ForwardedCall) *ForwardedReply {
	// Only calls for a world are ever forwarded: anything else that
	// arrives here was not sent by an edge node's chain, and is refused
	// before it runs with the identity it claims.
	policy := s.chain.Policies[fc.Method]
	if policy == nil || (policy.GetWorldless() && !forwardedWorldless[fc.Method]) || fc.ClientID == "" {
		return FailedReply(status.Errorf(codes.PermissionDenied, "Method %s is not forwarded between nodes", fc.Method))
	}
	in, out, err := methodTypes(fc.Method)
	if err != nil {
		return FailedReply(err)
	}
	req := in.New().Interface()
	if err := proto.Unmarshal(fc.Request, req); err != nil {
		return FailedReply(status.Errorf(codes.InvalidArgument, "forwarded %s: bad request: %v", fc.Method, err))
	}
	if policy.GetWorldless() {
		// A worldless call forwarded to a world's host is about that
		// world only.
		named, ok := req.(interface{ GetClientId() string })
		if !ok || named.GetClientId() != fc.ClientID {
			return FailedReply(status.Errorf(codes.PermissionDenied, "Method %s is not forwarded between nodes for another world", fc.Method))
		}
	}
	resp := out.New().Interface()
	ctx = context.WithValue(ctx, forwardedKey{}, fc)
	// The local connection turns outgoing metadata into the handler's
	// incoming metadata, as after a network hop.
	ctx = metadata.NewOutgoingContext(ctx, metadata.MD(fc.Metadata))
	var header, trailer metadata.MD
	err = s.Local.Invoke(ctx, fc.Method, req, resp, grpc.Header(&header), grpc.Trailer(&trailer))
	reply := &ForwardedReply{Header: header, Trailer: trailer}
	if err != nil {
		reply.Status = FailedReply(err).Status
		return reply
	}
	if reply.Response, err = proto.Marshal(resp); err != nil {
		return FailedReply(status.Errorf(codes.Internal, "forwarded %s: %v", fc.Method, err))
	}
	return reply
}

// FailedReply is the reply of a call that failed with err.
func FailedReply(err error) *ForwardedReply {
	st, _ := status.FromError(err)
	b, merr := proto.Marshal(st.Proto())
	if merr != nil {
		b, _ = proto.Marshal(status.New(codes.Internal, "Internal error").Proto())
	}
	return &ForwardedReply{Status: b}
}

// methodTypes returns a method's request and response message types, from
// the generated descriptors, remembered by method.
func methodTypes(method string) (protoreflect.MessageType, protoreflect.MessageType, error) {
	if t, ok := methodTypeCache.Load(method); ok {
		mt := t.([2]protoreflect.MessageType)
		return mt[0], mt[1], nil
	}
	svc, name, ok := splitMethod(method)
	if !ok {
		return nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if err != nil || !ok {
		return nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, nil, status.Errorf(codes.Unimplemented, "unknown method %s", method)
	}
	in, err1 := protoregistry.GlobalTypes.FindMessageByName(md.Input().FullName())
	out, err2 := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err1 != nil || err2 != nil {
		return nil, nil, status.Errorf(codes.Internal, "method %s: message types not linked in: %v %v", method, err1, err2)
	}
	methodTypeCache.Store(method, [2]protoreflect.MessageType{in, out})
	return in, out, nil
}

var methodTypeCache sync.Map // full method name → [2]protoreflect.MessageType

// splitMethod splits "/pkg.Service/Method".
func splitMethod(method string) (svc, name string, ok bool) {
	if len(method) < 4 || method[0] != '/' {
		return "", "", false
	}
	for i := len(method) - 1; i > 0; i-- {
		if method[i] == '/' {
			return method[1:i], method[i+1:], i > 1 && i < len(method)-1
		}
	}
	return "", "", false
}

// errNotHostedHere is the answer of a host asked for a world it no longer
// hosts (it moved between the edge's lookup and the call).
func errNotHostedHere(clientID string) error {
	return status.Error(codes.Unavailable, fmt.Sprintf("World %s is unavailable: its host changed, try again", clientID))
}
