package gateway

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strconv"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/wire"
)

// The envelope's members up to their values, as JSON text.
const (
	typeMember      = `{"` + wire.EnvelopeType + `":`
	requestIDMember = `,"` + wire.EnvelopeRequestID + `":`
	dataMember      = `,"` + wire.EnvelopeData + `":`
	errorMember     = `,"` + wire.EnvelopeError + `":`
)

// envelope is a success body: `{type, requestId, data}`.
type envelope struct {
	Type      string
	RequestID string
	Data      any // a proto.Message, raw JSON ([]byte) or nil
	// buffer, when set, lends the marshaler a recycled buffer (bufpool.go).
	buffer *responseBuffer
}

// jsonMarshaler writes protobuf messages as the contract wants them: field
// names in lowerCamelCase, every field present (zero values and nulls
// included), unknown input fields ignored; and it writes envelopes around
// them.
type jsonMarshaler struct {
	runtime.JSONPb
}

func newJSONMarshaler() *jsonMarshaler {
	return &jsonMarshaler{JSONPb: runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitUnpopulated: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: true},
	}}
}

// Marshal writes envelopes and error bodies itself and hands everything else
// to protojson.
func (m *jsonMarshaler) Marshal(v any) ([]byte, error) {
	switch e := v.(type) {
	case *envelope:
		size := 256
		if raw, ok := e.Data.([]byte); ok {
			size += len(raw)
		}
		buf := e.buffer.take(size)
		buf = append(buf, typeMember...)
		buf = appendString(buf, e.Type)
		buf = append(buf, requestIDMember...)
		buf = appendString(buf, e.RequestID)
		buf = append(buf, dataMember...)
		var err error
		switch d := e.Data.(type) {
		case []byte:
			// A response_body naming a raw_json field: the JSON itself,
			// copied as it is. Unlike an SSE frame, a REST body may span
			// lines, so the 33 KB scan for line breaks that
			// appendRawJSON does is skipped here.
			if len(d) == 0 {
				buf = append(buf, "null"...)
			} else {
				buf = append(buf, d...)
			}
		case proto.Message:
			if isNil(d) {
				buf = append(buf, "{}"...)
			} else {
				buf, err = appendMessage(buf, d.ProtoReflect())
			}
		default:
			buf = append(buf, "{}"...)
		}
		if err != nil {
			return nil, err
		}
		buf = append(buf, '}')
		e.buffer.keep(buf)
		return buf, nil
	}
	return m.JSONPb.Marshal(v)
}

// isNil reports whether a message is a typed nil pointer.
func isNil(msg proto.Message) bool {
	v := reflect.ValueOf(msg)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// wrapResponse is the mux's ForwardResponseRewriter: it puts the RPC's
// response (or the part its rule's response_body selects) in the envelope.
func (g *gateway) wrapResponse(ctx context.Context, resp proto.Message) (any, error) {
	var data any = resp
	if rb, ok := resp.(interface{ XXX_ResponseBody() any }); ok {
		data = rb.XXX_ResponseBody()
	}
	if v, ok := data.(*structpb.Value); ok {
		// A response_body naming a raw_json field: the JSON text itself
		// (see Marshal), null when unset.
		if raw, ok := jsonvalue.RawJSON(v); ok || v == nil {
			data = raw
		}
	}
	op := g.operationOf(ctx)
	return &envelope{Type: op + wire.ResultSuffix, RequestID: g.requestIDOf(ctx, op), Data: data, buffer: responseBufferFrom(ctx)}, nil
}

// operationOf returns the operation of the RPC a request was routed to.
func (g *gateway) operationOf(ctx context.Context) string {
	if rb := responseBufferFrom(ctx); rb != nil && rb.operation != "" {
		return rb.operation
	}
	if method, ok := runtime.RPCMethod(ctx); ok {
		if op := g.routes.operation(method); op != "" {
			return op
		}
	}
	return wire.ErrorOperation
}

// requestIDOf returns the request id the server issued, or a fresh one when
// the request failed before reaching the server.
func (g *gateway) requestIDOf(ctx context.Context, op string) string {
	if md, ok := runtime.ServerMetadataFromContext(ctx); ok {
		// The keys are lower case, as metadata keeps them: indexing the
		// maps skips the lower-casing MD.Get does on every call.
		// The answer to a write sent again with its idempotency key is the
		// first request's, envelope and all.
		if v := md.HeaderMD[wire.IdempotentReplayHeader]; len(v) > 0 && v[0] != "" {
			return v[0]
		}
		if v := md.HeaderMD[wire.RequestIDHeader]; len(v) > 0 {
			return v[0]
		}
		if v := md.TrailerMD[wire.RequestIDHeader]; len(v) > 0 {
			return v[0]
		}
	}
	return g.newRequestID(op)
}

// handleError is the mux's error handler: `{type, requestId, error}` with the
// HTTP status of the gRPC code.
func (g *gateway) handleError(ctx context.Context, _ *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	op := g.operationOf(ctx)
	var perr *paramError
	if errors.As(err, &perr) {
		err = status.Error(codes.InvalidArgument, perr.msg)
	}
	st := status.Convert(err)
	if st.Code() == codes.DeadlineExceeded && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		// The gateway's own time limit (Options.UnaryTimeout) passed: the
		// client side of the call reports only the context's error.
		st = status.New(codes.DeadlineExceeded, "The request timed out: it took longer than the relay's time limit")
	}
	g.writeStatus(w, st, op, g.requestIDOf(ctx, op))
}

// writeStatus writes the error body of a failed call, with the HTTP status of
// its code and, when it carries a retry delay, a Retry-After header. Every
// handler that turns a gRPC status into a response goes through it.
func (g *gateway) writeStatus(w http.ResponseWriter, st *status.Status, op, requestID string) {
	setRetryAfter(w, st)
	g.writeError(w, httpStatus(st), op, requestID, st.Message())
}

// setRetryAfter sets the Retry-After header, in whole seconds (at least
// one), when the status carries a retry delay (an errdetails.RetryInfo, as
// the server's rate limit sends).
func setRetryAfter(w http.ResponseWriter, st *status.Status) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.RetryInfo); ok && info.GetRetryDelay() != nil {
			delay := info.GetRetryDelay().AsDuration()
			seconds := int64((delay + time.Second - 1) / time.Second)
			w.Header().Set("Retry-After", strconv.FormatInt(max(seconds, 1), 10))
			return
		}
	}
}

// routingError answers a request that matches no route: 405 when the path
// is a route's for another method, else 404.
func (g *gateway) routingError(w http.ResponseWriter, r *http.Request) {
	code, msg := http.StatusNotFound, "Not found: "+r.Method+" "+r.URL.Path
	if g.routes.otherMethod(r.Method, r.URL.Path) {
		code, msg = http.StatusMethodNotAllowed, "Method not allowed: "+r.Method+" "+r.URL.Path
	}
	g.writeError(w, code, wire.ErrorOperation, g.newRequestID(wire.ErrorOperation), msg)
}

// writeError writes an error body.
func (g *gateway) writeError(w http.ResponseWriter, code int, op, requestID, msg string) {
	body := errorJSON(op, requestID, msg)
	h := w.Header()
	h.Del("Trailer")
	h.Set("Content-Type", "application/json")
	h.Set(wire.RequestIDHeader, requestID)
	if code == http.StatusUnauthorized {
		h.Set("WWW-Authenticate", `ApiKey header="`+wire.APIKeyHeader+`"`)
	}
	w.WriteHeader(code)
	_, _ = w.Write(body)
}

// errorJSON is an error body: `{type, requestId, error}`.
func errorJSON(op, requestID, msg string) []byte {
	body := append([]byte(typeMember), appendString(nil, op+wire.ResultSuffix)...)
	body = append(body, requestIDMember...)
	body = appendString(body, requestID)
	body = append(body, errorMember...)
	body = appendString(body, msg)
	return append(body, '}')
}

// httpStatus maps a status to its HTTP code: the gRPC code's usual status,
// except where an ErrorInfo reason asks for 413 or 429.
func httpStatus(st *status.Status) int {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			switch info.GetReason() {
			case wire.ReasonTooLarge:
				return http.StatusRequestEntityTooLarge
			case wire.ReasonRateLimited:
				return http.StatusTooManyRequests
			}
		}
	}
	return runtime.HTTPStatusFromCode(st.Code())
}
