// Package gateway is the relay's HTTP side: REST on the documented paths
// through grpc-gateway, the parameter merging that lets any parameter come in
// the query string or the JSON body, the `{type, requestId, data}` envelope
// and `{type, requestId, error}` error bodies, cross-origin requests from
// allowed web pages (CORS), `/healthz`, `/openapi.json` and the API
// reference page at `/docs`.
//
// Every REST call, unary or streaming (the event streams, downloads and
// uploads), goes through one client connection to the gRPC server and so
// through its interceptor chain (authentication, scopes, world and user
// resolution, policy), exactly as for gRPC callers. The relay gives it the
// server's in-process connection (server.LocalConn), which skips
// serialisation and the HTTP/2 transport; any grpc.ClientConnInterface to
// the relay's services works. The gateway knows nothing of worlds or keys.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	relayv1 "relay/gen/go/relay/v1"
	"relay/observe"
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
	// query parameter, remoteAddr the caller's address. A non-nil error is
	// a gRPC status, answered as such (401, 429 with Retry-After).
	Admit func(ctx context.Context, method, apiKey, ticket, remoteAddr string) error
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

// installQueryParser installs queryParser once: grpc-gateway keeps the query
// parser in a package variable, so setting it per mux would race with the
// requests of muxes already serving.
var installQueryParser sync.Once

// gateway holds the mux and what its hooks need.
type gateway struct {
	mux            *runtime.ServeMux
	conn           grpc.ClientConnInterface
	routes         *routeTable
	newRequestID   func(string) string
	maxBody        int64
	maxQuery       int
	unaryTimeout   time.Duration
	keepaliveEvery time.Duration
	spoolDir       string
	admit          func(ctx context.Context, method, apiKey, ticket, remoteAddr string) error
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
	g := &gateway{
		conn:           conn,
		routes:         loadRoutes(),
		newRequestID:   opts.NewRequestID,
		maxBody:        opts.MaxBodyBytes,
		maxQuery:       opts.MaxQueryBytes,
		unaryTimeout:   opts.UnaryTimeout,
		keepaliveEvery: opts.KeepaliveInterval,
		admit:          opts.Admit,
		spoolDir:       opts.SpoolDir,
		build:          opts.Build,
	}
	var err error
	if g.cors, err = newCORS(opts.CORSOrigins, g.routes); err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	installQueryParser.Do(func() { runtime.SetQueryParameterParser(queryParser{})(runtime.NewServeMux()) })
	g.mux = runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, newJSONMarshaler()),
		runtime.WithIncomingHeaderMatcher(incomingHeader),
		runtime.WithOutgoingHeaderMatcher(outgoingHeader),
		runtime.WithOutgoingTrailerMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithForwardResponseRewriter(g.wrapResponse),
		runtime.WithErrorHandler(g.handleError),
		runtime.WithMetadata(invalidParamsMD),
		runtime.WithRoutingErrorHandler(g.handleRoutingError),
		runtime.WithDisablePathLengthFallback(),
		// A length lets keep-alive clients read the body without chunked
		// framing and saves the closing chunk's write.
		runtime.WithWriteContentLength(),
	)
	// grpc-gateway tries the routes of a method newest first, at a cost
	// per route tried, so the busiest services are registered last.
	for _, register := range []func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error{
		bind(relayv1.RegisterFolderServiceHandlerClient, relayv1.NewFolderServiceClient),
		bind(relayv1.RegisterCanvasServiceHandlerClient, relayv1.NewCanvasServiceClient),
		bind(relayv1.RegisterScriptServiceHandlerClient, relayv1.NewScriptServiceClient),
		bind(relayv1.RegisterCombatServiceHandlerClient, relayv1.NewCombatServiceClient),
		bind(relayv1.RegisterFileServiceHandlerClient, relayv1.NewFileServiceClient),
		bind(relayv1.RegisterDnd5EServiceHandlerClient, relayv1.NewDnd5EServiceClient),
		bind(relayv1.RegisterEventServiceHandlerClient, relayv1.NewEventServiceClient),
		bind(relayv1.RegisterLinkServiceHandlerClient, relayv1.NewLinkServiceClient),
		bind(relayv1.RegisterKeyServiceHandlerClient, relayv1.NewKeyServiceClient),
		bind(relayv1.RegisterClientServiceHandlerClient, relayv1.NewClientServiceClient),
		bind(relayv1.RegisterTicketServiceHandlerClient, relayv1.NewTicketServiceClient),
		bind(relayv1.RegisterDocumentServiceHandlerClient, relayv1.NewDocumentServiceClient),
	} {
		if err := register(ctx, g.mux, conn); err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
	}
	if err := g.mux.HandlePath(http.MethodGet, "/healthz", g.healthz); err != nil {
		return nil, err
	}
	if err := g.handleDocs(); err != nil {
		return nil, err
	}
	if err := g.handleEventStreams(); err != nil {
		return nil, err
	}
	if err := g.handleFiles(opts.MaxUploadBytes); err != nil {
		return nil, err
	}
	return http.HandlerFunc(g.serveHTTP), nil
}

// bind pairs a service's generated handler registration with its client
// constructor, so that every service can be registered over any connection.
func bind[C any](register func(context.Context, *runtime.ServeMux, C) error, newClient func(grpc.ClientConnInterface) C) func(context.Context, *runtime.ServeMux, grpc.ClientConnInterface) error {
	return func(ctx context.Context, mux *runtime.ServeMux, conn grpc.ClientConnInterface) error {
		return register(ctx, mux, newClient(conn))
	}
}

// incomingHeader forwards the API key into gRPC metadata, and nothing else
// the caller could use to impersonate the gateway.
func incomingHeader(key string) (string, bool) {
	if strings.EqualFold(key, apiKeyHeader) {
		return "x-api-key", true
	}
	return "", false
}

// outgoingHeader passes the request id back as a plain HTTP header and keeps
// other gRPC metadata out of responses.
func outgoingHeader(key string) (string, bool) {
	if key == requestIDMetadata {
		return requestIDHeader, true
	}
	return "", false
}

// serveHTTP merges query and body parameters into the form the generated
// handlers read, then hands the request to the mux.
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
				rec.SetRoute(prt.pattern)
			}
		}
	}
	if g.handleCORS(w, r) {
		return
	}
	if len(r.URL.RawQuery) > g.maxQuery {
		op := "error"
		if rt != nil {
			op = rt.operation
		}
		g.writeError(w, http.StatusRequestURITooLong, op, g.newRequestID(op),
			fmt.Sprintf("Query string too long: the limit is %d bytes; send large parameters in the JSON body", g.maxQuery))
		return
	}
	if rt != nil && !g.admitted(w, r, rt) {
		return
	}
	if rt == nil || rt.clientStreaming || isEventStream(rt) || isFileTransfer(rt) {
		g.mux.ServeHTTP(w, r)
		return
	}
	var body []byte
	if r.Body != nil {
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
	fields, err := mergeFields(rt.input, body, r.URL.Query())
	if err != nil {
		var ctx context.Context
		fields, ctx = deferParamError(r.Context(), err.Error(), body, r.URL.Query())
		r = r.WithContext(ctx)
	}
	switch {
	case rt.serverStreaming:
		g.serveEvents(w, r, rt, appendObject(nil, fields))
		return
	case rt.bodyStar:
		merged := appendObject(nil, fields)
		r.Body = io.NopCloser(bytes.NewReader(merged))
		r.ContentLength = int64(len(merged))
		r.Header.Set("Content-Type", "application/json")
		r.URL.RawQuery = ""
	default:
		// The generated handler reads its parameters from r.Form, which
		// ParseForm leaves alone once set: handing the merged fields over
		// there saves writing them into the query and parsing them back.
		r.Body = http.NoBody
		r.ContentLength = 0
		r.URL.RawQuery = ""
		r.Form = formFields(fields)
		r.PostForm = url.Values{}
	}
	ctx, answer := withResponseBuffer(r.Context())
	if g.unaryTimeout > 0 {
		// The deadline travels with the gRPC call: the server's handler
		// sees it, and the call ends with DeadlineExceeded (504) when it
		// passes. Streams and file transfers took other branches above.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.unaryTimeout)
		defer cancel()
	}
	g.mux.ServeHTTP(w, r.WithContext(ctx))
	// The answer is written: its buffer can serve the next one.
	answer.release()
}

// admitted runs the Admit hook for a request on a route, before anything of
// its body is read, and answers the refusal when there is one.
func (g *gateway) admitted(w http.ResponseWriter, r *http.Request, rt *route) bool {
	if g.admit == nil {
		return true
	}
	var ticket string
	if isEventStream(rt) {
		ticket = r.URL.Query().Get("ticket")
	}
	err := g.admit(r.Context(), rt.fullMethod, r.Header.Get(apiKeyHeader), ticket, r.RemoteAddr)
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
func (g *gateway) healthz(w http.ResponseWriter, r *http.Request, _ map[string]string) {
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
