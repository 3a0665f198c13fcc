package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/wire"
)

// The gRPC servers read each request message themselves, before any
// interceptor runs, and when that fails they answer with a status of their
// own:
//
//   - ResourceExhausted "grpc: received message larger than max (N vs. M)"
//     for a message over grpc.MaxRecvMsgSize, which the relay sets to
//     --max-body-bytes, the limit of REST bodies. grpc-go checks the
//     message's length prefix and refuses it before reading it, and sends
//     this status itself, before the handler can give it another: gRPC
//     callers get grpc-go's text, which names the limit, without the
//     TOO_LARGE reason of the relay's other size refusals. (The per-key
//     rate limit's ResourceExhausted carries the RATE_LIMITED reason and a
//     retry delay, so the two stay apart.)
//   - Internal, a server fault, for a message that is not protobuf or that
//     nests past protobuf's recursion limit (10,000 levels, a JSON value
//     5,000 deep in a google.protobuf.Struct), though the fault is the
//     caller's. serverCodec decodes messages as grpc-go's codec does, but
//     hands a message it cannot decode to the handler marked as such
//     instead of failing the read, and decodeRegistrar's handlers refuse
//     it with InvalidArgument.
//
// A gRPC call that reaches the relay through its HTTP server (an h2c
// connection whose first request was REST, see cmd/relay) goes through
// Server.ServeHTTP, which admits it from its headers and refuses an
// oversized first message from its length prefix, both before reading it,
// with the relay's own status: ResourceExhausted with the TOO_LARGE reason
// and the limit.

// ServeHTTP serves a gRPC call that arrived as an HTTP/2 request on the
// relay's HTTP server, through grpc-go's compatibility path (slower than
// its own transport, see Serve). The call is admitted from its headers,
// and a first message over the size limit is refused before it is read
// (see above).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	creds := Credentials{APIKey: r.Header.Get(wire.APIKeyHeader), Ticket: r.Header.Get(wire.StreamTicketHeader), Authorization: r.Header.Get("Authorization")}
	if err := s.Admit(r.Context(), r.URL.Path, creds, r.RemoteAddr); err != nil {
		writeGRPCStatus(w, status.Convert(err))
		return
	}
	var prefix [5]byte // compressed flag, then the length, big-endian
	n, err := io.ReadFull(r.Body, prefix[:])
	if err == nil {
		if size := binary.BigEndian.Uint32(prefix[1:]); int64(size) > int64(s.maxMessageBytes) {
			s.log.InfoContext(r.Context(), "refused a gRPC request over the size limit", "method", r.URL.Path, "bytes", size, "limit", s.maxMessageBytes)
			writeGRPCStatus(w, tooLargeStatus(s.maxMessageBytes))
			return
		}
	}
	// The gRPC server reads the request from the start, and sees the end
	// or the failure of the body where it happened.
	r.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(prefix[:n]), r.Body), Closer: r.Body}
	s.GRPC.ServeHTTP(w, r)
}

// readCloser is a body made of a reader and the original body's Close.
type readCloser struct {
	io.Reader
	io.Closer
}

// tooLargeStatus is the status of a request message over the limit.
func tooLargeStatus(limit int) *status.Status {
	return status.Convert(withReason(codes.ResourceExhausted, fmt.Sprintf("Request message too large: the limit is %d bytes", limit), wire.ReasonTooLarge))
}

// writeGRPCStatus answers a gRPC call with a status and no message, as a
// "Trailers-Only" response: the status in the response headers, which end
// the stream.
func writeGRPCStatus(w http.ResponseWriter, st *status.Status) {
	h := w.Header()
	h.Set("Content-Type", "application/grpc")
	h.Set("Grpc-Status", fmt.Sprint(int32(st.Code())))
	h.Set("Grpc-Message", percentEncode(st.Message()))
	if details, err := proto.Marshal(st.Proto()); err == nil && len(st.Proto().GetDetails()) > 0 {
		h.Set("Grpc-Status-Details-Bin", base64.RawStdEncoding.EncodeToString(details))
	}
	w.WriteHeader(http.StatusOK)
}

// percentEncode encodes a grpc-message header value: bytes outside
// printable ASCII, and the percent sign, as %XX.
func percentEncode(msg string) string {
	var b strings.Builder
	for i := 0; i < len(msg); i++ {
		c := msg[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// undecodableField is the unknown field serverCodec leaves on a message
// it could not decode: the highest field number protobuf allows, which no
// relay message uses, holding the reason.
const undecodableField protowire.Number = protowire.MaxValidNumber

// Reasons a message could not be decoded, as the marker field holds them.
const (
	undecodableDepth     = "relay: too deep"
	undecodableMalformed = "relay: malformed"
)

// serverCodec is the gRPC servers' codec: grpc-go's protobuf codec, except
// that unknown fields are dropped; that a message that fails to decode is
// left empty with a marker (undecodableField) and no error, so that the
// handler, not the transport, answers for it (see decodeRegistrar); and
// that responses are written into buffers of the relay's own pool, their
// raw Values transcoded into Value trees (codec.go). A service that does
// not look for the marker sees an empty request, which no relay method
// accepts.
type serverCodec struct {
	encoding.CodecV2
}

func newServerCodec() serverCodec {
	return serverCodec{CodecV2: encoding.GetCodecV2(grpcproto.Name)}
}

// Unmarshal decodes a message, marking it when it cannot.
func (c serverCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	// A message that arrived in several pieces is put together in a buffer
	// of receivePool (grpc-go's codec would take one of its default pool:
	// 1 MiB, cleared, for anything over 32 KiB).
	buf := data.MaterializeToBuffer(receivePool)
	// Unknown fields are dropped: no handler reads them, and the relay's
	// own in-process markers (a REST parameter's JSON text in a raw
	// Struct, see package jsonvalue) must not be forged by a gRPC caller.
	err := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(buf.ReadOnlyData(), m)
	buf.Free()
	if err == nil {
		return nil
	}
	reason := undecodableMalformed
	if strings.Contains(err.Error(), "recursion depth") {
		reason = undecodableDepth
	}
	proto.Reset(m)
	marker := protowire.AppendTag(nil, undecodableField, protowire.BytesType)
	m.ProtoReflect().SetUnknown(protowire.AppendString(marker, reason))
	return nil
}

// undecodable returns the error for a message serverCodec marked, or nil.
func undecodable(v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return nil
	}
	unknown := m.ProtoReflect().GetUnknown()
	if len(unknown) == 0 {
		return nil
	}
	num, typ, n := protowire.ConsumeTag(unknown)
	if n < 0 || num != undecodableField || typ != protowire.BytesType {
		return nil
	}
	reason, m2 := protowire.ConsumeString(unknown[n:])
	if m2 < 0 || n+m2 != len(unknown) {
		return nil
	}
	switch reason {
	case undecodableDepth:
		return status.Error(codes.InvalidArgument, "The request message nests too deeply to be read (protobuf's limit is 10000 levels)")
	case undecodableMalformed:
		return status.Error(codes.InvalidArgument, "The request message is not a valid protobuf message of the method's request type")
	}
	return nil
}

// checkReceived refuses a received message that serverCodec marked, or
// that holds a number JSON cannot carry (NaN or an infinity) in a
// google.protobuf.Value, Struct or ListValue: a REST caller cannot send
// one, and the relay must not store or forward what it would turn into
// the strings "NaN" and "Infinity". The refusal names the field and the
// path to the number.
func checkReceived(m any) error {
	if err := undecodable(m); err != nil {
		return err
	}
	msg, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	if path := jsonvalue.NonFinite(msg); path != "" {
		field, _, _ := strings.Cut(path, ".")
		return status.Errorf(codes.InvalidArgument, "'%s' must be JSON data: numbers must be finite, and NaN and the infinities are not (at %s)", field, path)
	}
	return nil
}

// decodeRegistrar registers services on a gRPC server so that their
// handlers refuse the messages serverCodec marked, and bound how long each
// message may take to arrive (recvguard.go).
type decodeRegistrar struct {
	server *grpc.Server
}

// RegisterService registers a copy of desc whose handlers check every
// message they receive.
func (r decodeRegistrar) RegisterService(desc *grpc.ServiceDesc, impl any) {
	d := *desc
	d.Methods = slices.Clone(desc.Methods)
	for i := range d.Methods {
		handler := d.Methods[i].Handler
		d.Methods[i].Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			return handler(srv, ctx, func(m any) error {
				if err := guardRecv(ctx, func() error { return dec(m) }); err != nil {
					return err
				}
				return checkReceived(m)
			}, interceptor)
		}
	}
	d.Streams = slices.Clone(desc.Streams)
	for i := range d.Streams {
		handler := d.Streams[i].Handler
		d.Streams[i].Handler = func(srv any, stream grpc.ServerStream) error {
			return handler(srv, decodeStream{ServerStream: stream})
		}
	}
	r.server.RegisterService(&d, impl)
}

// GetServiceInfo reports the server's services, for server reflection.
func (r decodeRegistrar) GetServiceInfo() map[string]grpc.ServiceInfo {
	return r.server.GetServiceInfo()
}

// decodeStream is a stream whose received messages are checked for
// serverCodec's marker.
type decodeStream struct {
	grpc.ServerStream
}

func (s decodeStream) RecvMsg(m any) error {
	if err := guardRecv(s.Context(), func() error { return s.ServerStream.RecvMsg(m) }); err != nil {
		return err
	}
	return checkReceived(m)
}
