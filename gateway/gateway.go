// Package gateway is the relay's HTTP side: REST on the documented paths,
// the parameter merging that lets any parameter come in the query string or
// the JSON body, the `{type, requestId, data}` envelope and `{type,
// requestId, error}` error bodies, the Server-Sent Events bridge,
// cross-origin requests from allowed web pages (CORS), `/healthz`,
// `/openapi.json` and the API reference page at `/docs`.
//
// A request finds its route in one table built from the contract's HTTP
// rules (routes.go), in which no two patterns can match the same request,
// so no order of registration decides anything. Its parameters are merged
// and decoded by protojson into the RPC's request message (params.go), and
// the RPC is called with grpc-gateway's runtime doing what its generated
// handlers would (forwarded headers, metadata, the answer's envelope and
// error body). Every REST call, unary or streaming (the event streams,
// downloads and uploads), goes through one client connection to the gRPC
// server and so through its interceptor chain (authentication, scopes,
// world and user resolution, policy), exactly as for gRPC callers. The
// relay gives it the server's in-process connection (server.LocalConn),
// which skips serialisation and the HTTP/2 transport; any
// grpc.ClientConnInterface to the relay's services works. The gateway
// knows nothing of worlds or keys.
package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/wire"
)

// Options configure the gateway.
type Options struct {
	// NewRequestID issues a request id for an operation, for requests that
	// fail before they reach the gRPC server (bad JSON, unknown path). It
	// should be the server's own generator, so ids stay unique.
	NewRequestID func(operation string) string
	// MaxBodyBytes bounds a request body; 1 MiB when 0.
	MaxBodyBytes int64
	// KeepaliveInterval is how long an event stream may stay silent before
	// a keepalive comment is sent; 15 s when 0.
	KeepaliveInterval time.Duration
	// MaxUploadBytes is the server's upload limit (files.go); the gateway
	// bounds the JSON upload bodies it buffers with it. 64 MiB when 0.
	MaxUploadBytes int64
	// MaxQueryBytes bounds the query string (DefaultMaxQueryBytes when 0);
	// a longer one is refused with 414 before anything else is read.
	MaxQueryBytes int
	// UnaryTimeout bounds the handling of a unary REST call, which then
	// answers 504; 0 means no bound. Event streams and file transfers are
	// not bounded.
	UnaryTimeout time.Duration
	// SpoolDir is where a JSON upload whose file data comes before its
	// file name is kept until the name arrives (the system's temporary
	// directory when empty). It is best on the same disk as the data: the
	// files are as large as uploads.
	SpoolDir string
	// Admit, when set, decides from the headers alone whether a REST call
	// may go on, before any of its body is read: method is the route's RPC,
	// apiKey the `X-Api-Key` header, ticket an event stream's `ticket`
	// query parameter, authorization the Authorization header (read only
	// to tell a caller who sent a bearer token which header to use),
	// remoteAddr the caller's address. A non-nil error is
	// a gRPC status, answered as such (401, 429 with Retry-After).
	Admit func(ctx context.Context, method, apiKey, ticket, authorization, remoteAddr string) error
	// CORSOrigins are the origins whose web pages may call the API from a
	// browser (see cors.go): exact origins as ParseCORSOrigins reads them,
	// or `*` for every origin. None when empty.
	CORSOrigins []string
	// Build names the running relay's version in `/healthz`.
	Build BuildInfo
}

// BuildInfo identifies a build of the relay.
type BuildInfo struct {
	// Version is the release (`v1.2.0`), or `devel` for a build from a
	// checkout.
	Version string `json:"version"`
	// Commit is the git commit built, with `-dirty` when the checkout had
	// changes; empty when unknown.
	Commit string `json:"commit"`
	// Date is the commit's time (or the one set at link time), RFC 3339;
	// empty when unknown.
	Date string `json:"date"`
}

// DefaultMaxQueryBytes is the query string limit when Options leave it 0:
// room for a JSON `data` object or array parameter, far below the header
// limit.
const DefaultMaxQueryBytes = 16 << 10

// gateway holds the mux and what its hooks need.
type gateway struct {
	mux            *runtime.ServeMux
	maxUpload      int64
	conn           grpc.ClientConnInterface
	routes         *routeTable
	newRequestID   func(string) string
	maxBody        int64
	maxQuery       int
	unaryTimeout   time.Duration
	keepaliveEvery time.Duration
	spoolDir       string
	admit          func(ctx context.Context, method, apiKey, ticket, authorization, remoteAddr string) error
	cors           *cors
	build          BuildInfo
}

// New returns the HTTP handler of the REST API, calling the gRPC server
// through conn, for unary calls and streams alike.
func New(ctx context.Context, conn grpc.ClientConnInterface, opts Options) (http.Handler, error) {
	if opts.NewRequestID == nil {
		return nil, errors.New("gateway: NewRequestID is required")
	}
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 1 << 20
	}
	if opts.KeepaliveInterval == 0 {
		opts.KeepaliveInterval = 15 * time.Second
	}
	if opts.MaxQueryBytes == 0 {
		opts.MaxQueryBytes = DefaultMaxQueryBytes
	}
	if opts.MaxUploadBytes <= 0 {
		opts.MaxUploadBytes = defaultMaxUpload
	}
	g := &gateway{
		conn:           conn,
		maxUpload:      opts.MaxUploadBytes,
		newRequestID:   opts.NewRequestID,
		maxBody:        opts.MaxBodyBytes,
		maxQuery:       opts.MaxQueryBytes,
		unaryTimeout:   opts.UnaryTimeout,
		keepaliveEvery: opts.KeepaliveInterval,
		admit:          opts.Admit,
		spoolDir:       opts.SpoolDir,
		build:          opts.Build,
	}
	// The gateway's own paths are public and answer at once.
	own := docsRoutes()
	own[http.MethodGet+" /healthz"] = g.healthz
	routes, err := loadRoutes(own)
	if err != nil {
		return nil, err
	}
	g.routes = routes
	if g.cors, err = newCORS(opts.CORSOrigins, g.routes); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	// The mux is grpc-gateway's machinery for the calls the gateway makes
	// (callUnary): forwarded headers, metadata, the response's envelope,
	// error bodies. It routes nothing: the route table does.
	g.mux = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, newJSONMarshaler()),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithForwardResponseRewriter(g.wrapResponse),
		runtime.WithErrorHandler(g.handleError),
		runtime.WithMetadata(invalidParamsMD),
		// A length lets keep-alive clients read the body without chunked
		// framing and saves the closing chunk's write.
		runtime.WithWriteContentLength(),
	)
	return http.HandlerFunc(g.serveHTTP), nil
}

// incomingHeader forwards the API key and a write's idempotency key into
// gRPC metadata, and nothing else the caller could use to impersonate the
// gateway.
func incomingHeader(key string) (string, bool) {
	if strings.EqualFold(key, wire.APIKeyHeader) {
		return wire.APIKeyHeader, true
	}
	if strings.EqualFold(key, wire.IdempotencyKeyHeader) {
		return wire.IdempotencyKeyHeader, true
	}
	return "", false
}

// outgoingHeader passes the request id, and the mark of an answer given
// again for an idempotency key, back as plain HTTP headers and keeps other
// gRPC metadata out of responses.
func outgoingHeader(key string) (string, bool) {
	if key == wire.RequestIDHeader || key == wire.IdempotentReplayHeader {
		return key, true
	}
	return "", false
}

// serveHTTP routes a request by the route table: the gateway's own paths,
// the event streams and file transfers to their handlers, and the other
// RPCs' routes, once their query and body parameters are merged into the
// form the generated handlers read, to the mux (as is a request that
// matches no route, for its 404 or 405).
func (g *gateway) serveHTTP(w http.ResponseWriter, r *http.Request) {
	// A browser's preflight carries no API key: it is answered before the
	// admission step, and every other answer, refusals included, is
	// marked for the page that asked.
	rt := g.routes.match(r.Method, r.URL.Path)
	if rec := observe.RecordFrom(r.Context()); rec != nil {
		// The access line and the metrics label the request with its
		// route's pattern; a preflight with the route it asks about.
		if prt := rt; prt != nil || r.Method == http.MethodOptions {
			if prt == nil {
				prt = g.routes.match(r.Header.Get("Access-Control-Request-Method"), r.URL.Path)
			}
			if prt != nil {
				rec.SetRoute(prt.path)
			}
		}
	}
	if g.handleCORS(w, r) {
		return
	}
	if len(r.URL.RawQuery) > g.maxQuery {
		op := wire.ErrorOperation
		if rt != nil && rt.operation != "" {
			op = rt.operation
		}
		g.writeError(w, http.StatusRequestURITooLong, op, g.newRequestID(op),
			fmt.Sprintf("Query string too long: the limit is %d bytes; send large parameters in the JSON body", g.maxQuery))
		return
	}
	switch {
	case rt == nil:
		g.routingError(w, r)
		return
	case rt.own != nil:
		rt.own(w, r)
		return
	case !g.admitted(w, r, rt):
		return
	case isFileTransfer(rt):
		g.serveFile(w, r, rt)
		return
	case rt.serverStreaming:
		// The event streams, and any other server-streaming RPC.
		g.serveSubscribe(w, r, rt)
		return
	}
	var body []byte
	// A request without a body (most reads) skips the reader and the
	// buffer that reading nothing would still allocate.
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, g.maxBody))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				g.writeError(w, http.StatusRequestEntityTooLarge, rt.operation, g.newRequestID(rt.operation),
					fmt.Sprintf("Request body too large: the limit is %d bytes", g.maxBody))
				return
			}
			code, msg := bodyReadFailure(err)
			g.writeError(w, code, rt.operation, g.newRequestID(rt.operation), msg)
			return
		}
	}
	req := rt.request.New().Interface()
	if err := decodeParams(req, body, r.URL.Query()); err != nil {
		// The call still goes to the server, with only the parameters
		// that choose its world and user (see deferParamError).
		fields, ctx := deferParamError(r.Context(), err.Error(), body, r.URL.Query())
		_ = decodeFields(req, fields)
		r = r.WithContext(ctx)
	}
	// Path variables (`/keys/{id}`, string fields: see addMethod) win over
	// parameters of the same name.
	for name, value := range rt.pathVariables(r.URL.Path) {
		if fd := req.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name)); fd != nil {
			req.ProtoReflect().Set(fd, protoreflect.ValueOfString(value))
		}
	}
	g.callUnary(w, r, rt, req)
}

// callUnary calls a unary RPC with its request and answers with the
// envelope of its response, or the error body of its failure. It does what
// grpc-gateway's generated handlers do, for every route at once: the
// context carries the forwarded headers and the metadata annotators'
// (runtime.AnnotateContext), and the mux's options write the answer.
func (g *gateway) callUnary(w http.ResponseWriter, r *http.Request, rt *route, req proto.Message) {
	ctx, answer := withResponseBuffer(r.Context())
	answer.operation = rt.operation
	// The answer is written by the time this returns: its buffer can serve
	// the next one.
	defer answer.release()
	if g.unaryTimeout > 0 {
		// The deadline travels with the gRPC call: the server's handler
		// sees it, and the call ends with DeadlineExceeded (504) when it
		// passes. Streams and file transfers took other branches.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.unaryTimeout)
		defer cancel()
	}
	// The call's context goes to grpc-gateway's functions as their own
	// argument; they read only the request's headers, so the request is
	// not copied to carry it.
	_, out := runtime.MarshalerForRequest(g.mux, r)
	ctx, err := g.annotate(ctx, r, rt)
	if err != nil {
		runtime.HTTPError(ctx, g.mux, out, w, r, err)
		return
	}
	var md runtime.ServerMetadata
	resp := rt.output.New().Interface()
	err = g.conn.Invoke(ctx, rt.fullMethod, req, resp, grpc.Header(&md.HeaderMD), grpc.Trailer(&md.TrailerMD))
	ctx = runtime.NewServerMetadataContext(ctx, md)
	if err != nil {
		runtime.HTTPError(ctx, g.mux, out, w, r, err)
		return
	}
	var msg proto.Message = resp
	if rt.responseBody != nil {
		msg = responseBody{Message: resp, field: rt.responseBody}
	}
	if h := answerHolder(r); h != nil {
		// The answer's length is known (Content-Length): its headers and
		// its whole body leave in one write (see writeHolder).
		h.HoldNextWrite()
		defer func() { _ = h.ReleaseHeld() }()
	}
	runtime.ForwardResponseMessage(ctx, g.mux, out, w, r, msg, g.mux.GetForwardResponseOptions()...)
}

// annotate returns ctx with the outgoing metadata of a unary call: the API
// key, the Authorization header, and a deferred parameter error
// (invalidParamsMD). It is what
// runtime.AnnotateContext makes of a request with the mux's options,
// built directly: grpc-gateway's version copies every header through
// the matcher and joins several metadata maps, a good share of a small
// read's cost. The x-forwarded-host and x-forwarded-for metadata it adds
// are left out, since nothing in the relay reads them. A request with a
// `Grpc-Timeout` header, which asks for a deadline of its own, still goes
// through grpc-gateway's version, which reads and checks it. The route's
// operation travels with the response buffer (see operationOf).
func (g *gateway) annotate(ctx context.Context, r *http.Request, rt *route) (context.Context, error) {
	if _, ok := r.Header[grpcTimeoutHeader]; ok {
		annotated, err := runtime.AnnotateContext(ctx, g.mux, r, rt.fullMethod, runtime.WithHTTPPathPattern(rt.path))
		if err != nil {
			// A malformed timeout: grpc-gateway returns no context with
			// its error, and the error body is written with the
			// request's (a nil one made the answer panic, and the
			// connection drop without one).
			return ctx, err
		}
		return annotated, nil
	}
	var md metadata.MD
	for _, v := range r.Header[apiKeyHeaderKey] {
		// grpc-gateway drops a value that is not printable ASCII, which
		// gRPC metadata cannot carry.
		if !printableASCII(v) {
			continue
		}
		if md == nil {
			md = make(metadata.MD, 2)
		}
		md[wire.APIKeyHeader] = append(md[wire.APIKeyHeader], v)
	}
	for _, v := range r.Header[authorizationHeaderKey] {
		// grpc-gateway passes the Authorization header on as
		// "authorization", whatever the matcher says: the server reads it
		// only to tell a caller who sent a bearer token where the key goes.
		if !printableASCII(v) {
			continue
		}
		if md == nil {
			md = make(metadata.MD, 2)
		}
		md["authorization"] = append(md["authorization"], v)
	}
	for _, v := range r.Header[idempotencyKeyHeaderKey] {
		if md == nil {
			md = make(metadata.MD, 2)
		}
		if !printableASCII(v) {
			// A key metadata cannot carry is refused by the server's
			// chain, in its turn, as an unreadable parameter.
			if _, deferred := ctx.Value(invalidParamsKey{}).(string); !deferred {
				md[wire.InvalidParamsHeader] = []string{"Invalid Idempotency-Key: it must be printable ASCII characters only"}
			}
			continue
		}
		md[wire.IdempotencyKeyHeader] = append(md[wire.IdempotencyKeyHeader], v)
	}
	if msg, ok := ctx.Value(invalidParamsKey{}).(string); ok {
		if md == nil {
			md = make(metadata.MD, 1)
		}
		md[wire.InvalidParamsHeader] = append(md[wire.InvalidParamsHeader], msg)
	}
	if md == nil {
		return ctx, nil
	}
	return metadata.NewOutgoingContext(ctx, md), nil
}

// grpcTimeoutHeader and apiKeyHeaderKey are header names as net/http
// keys them.
var (
	grpcTimeoutHeader      = http.CanonicalHeaderKey("Grpc-Timeout")
	apiKeyHeaderKey        = http.CanonicalHeaderKey(wire.APIKeyHeader)
	authorizationHeaderKey = http.CanonicalHeaderKey("Authorization")
	// idempotencyKeyHeaderKey is the write's Idempotency-Key.
	idempotencyKeyHeaderKey = http.CanonicalHeaderKey(wire.IdempotencyKeyHeader)
)

// headerValue is r.Header.Get for a name already in canonical form:
// Header.Get canonicalizes the name it is given on every call, which for
// a lower-case constant such as wire.APIKeyHeader builds a new string
// each time.
func headerValue(h http.Header, canonicalKey string) string {
	if v := h[canonicalKey]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// printableASCII reports whether s is a valid gRPC metadata text value:
// bytes 0x20 to 0x7E.
func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7E {
			return false
		}
	}
	return true
}

// writeHolder is a connection that can keep one write back and send it
// with the next (netlimit's connections). net/http sends an HTTP/1.1
// answer longer than its 4 KiB connection buffer in two writes, the
// buffer (headers and the body's start) and then the rest of the body;
// held together, they leave in one system call and wake the client once.
type writeHolder interface {
	HoldNextWrite()
	ReleaseHeld() error
}

// answerHolder returns the request's connection when it can hold a write
// for its answer: HTTP/1.x without TLS (net/http's HTTP/2 frames its
// answers on a goroutine of its own), on a connection recorded by
// ConnContext.
func answerHolder(r *http.Request) writeHolder {
	if r.ProtoMajor != 1 || r.TLS != nil {
		return nil
	}
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	for c != nil {
		if h, ok := c.(writeHolder); ok {
			return h
		}
		p, ok := c.(plainConn)
		if !ok {
			return nil
		}
		c = p.PlainConn()
	}
	return nil
}

// responseBody is a response whose rule's response_body names one of its
// fields: the envelope's data is that field (see wrapResponse).
type responseBody struct {
	proto.Message
	field protoreflect.FieldDescriptor
}

// XXX_ResponseBody returns the field, as grpc-gateway's generated
// response wrappers do: raw JSON bytes or a message.
func (b responseBody) XXX_ResponseBody() any {
	v := b.ProtoReflect().Get(b.field)
	if b.field.Kind() == protoreflect.BytesKind {
		return v.Bytes()
	}
	return v.Message().Interface()
}

// admitted runs the Admit hook for a request on a route, before anything of
// its body is read, and answers the refusal when there is one.
func (g *gateway) admitted(w http.ResponseWriter, r *http.Request, rt *route) bool {
	if g.admit == nil {
		return true
	}
	var ticket string
	if isEventStream(rt) {
		ticket = r.URL.Query().Get(wire.TicketParam)
	}
	err := g.admit(r.Context(), rt.fullMethod, headerValue(r.Header, apiKeyHeaderKey), ticket, headerValue(r.Header, authorizationHeaderKey), r.RemoteAddr)
	if err == nil {
		return true
	}
	if r.ContentLength != 0 && r.ProtoMajor == 1 {
		// The body stays unread: closing the connection after the answer
		// keeps the server from draining it first, which a caller that
		// trickles its body could make last as long as it liked. (Over
		// HTTP/2 the stream is reset instead; the header would close the
		// connection with every other stream on it.)
		w.Header().Set("Connection", "close")
	}
	g.writeStatus(w, status.Convert(err), rt.operation, g.newRequestID(rt.operation))
	return false
}

// healthz answers 200 when the gRPC server reports SERVING, else 503,
// with the relay's build: `{"status", "version", "commit", "date"}`.
func (g *gateway) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(g.conn).Check(ctx, &healthpb.HealthCheckRequest{})
	code, state := http.StatusOK, "SERVING"
	if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		code, state = http.StatusServiceUnavailable, "NOT_SERVING"
	}
	body, _ := json.Marshal(struct {
		Status string `json:"status"`
		BuildInfo
	}{state, g.build})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
