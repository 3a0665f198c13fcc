// Package observe is the relay's observability: the access log line of
// every HTTP request and the Prometheus metrics.
//
// One line per request, never two: an HTTP request (REST, SSE, the
// console, the tabletop module's endpoints) is logged once, by the HTTP
// middleware ([Access]), when it ends; the interceptor chain that runs the
// request's RPC fills the request's [Record] (its RPC, gRPC code, request
// id, key id and world) instead of writing its own line. A gRPC-native call
// never passes the middleware, and the chain writes its "rpc" line. Neither
// line ever holds an API key, a ticket, a query string or a body.
package observe

import "context"

// Record is what the layers below the HTTP middleware learn about a
// request, for its access line and metrics. The middleware makes one per
// request and puts it in the request's context; the gateway sets Route, the
// interceptor chain the rest. Fields are written by the goroutine that
// handles the request before the handler returns, and read after.
type Record struct {
	// Route is the route's label: its path pattern as the contract writes
	// it (`/get`, `/keys/{id}`), never the request's own path, so that
	// metrics have one series per route.
	Route string
	// RPC is the full gRPC method the request called, when it reached
	// one.
	RPC string
	// Code is the gRPC status code the RPC ended with.
	Code string
	// RequestID is the request's id (also sent as X-Request-Id).
	RequestID string
	// KeyID is the id (never the secret) of the API key the request
	// authenticated with.
	KeyID string
	// World is the client id of the world the request acted on.
	World string
}

// recordKey is the context key of the Record.
type recordKey struct{}

// WithRecord returns a context carrying rec.
func WithRecord(ctx context.Context, rec *Record) context.Context {
	return context.WithValue(ctx, recordKey{}, rec)
}

// RecordFrom returns the request's Record, or nil outside an HTTP request
// (a gRPC-native call).
func RecordFrom(ctx context.Context) *Record {
	rec, _ := ctx.Value(recordKey{}).(*Record)
	return rec
}
