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

import (
	"context"
	"sync"
)

// Record is what the layers below the HTTP middleware learn about a
// request, for its access line and metrics. The middleware makes one per
// request and puts it in the request's context; the gateway sets Route
// (with SetRoute), the interceptor chain the rest (with Set). An event
// stream's handler runs in a goroutine of its own that may still be ending
// when the HTTP handler has returned (the client went away), so the record
// is guarded: the access line then shows what was known.
type Record struct {
	mu sync.Mutex
	RecordFields
	// detached is set by Detach: the answer goes on after the handler
	// returned, and the access line waits for its end.
	detached *detachedAnswer
}

// DetachedEnd is how a detached answer ended (see Record.Detach): the
// bytes written after the handler returned, and the RPC's final outcome.
type DetachedEnd struct {
	Bytes int64
	// Code and Error replace the record's when Code is set.
	Code, Error string
}

// RecordFields are a Record's values.
type RecordFields struct {
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
	// User is the name of the tabletop user the request acted as.
	User string
	// Error is the RPC's error message, when it failed.
	Error string
	// Bytes counts the bytes of the answer written to the connection
	// around the ResponseWriter (an event stream's frames that the event
	// hub's writers write directly); the access line adds them to the
	// ResponseWriter's.
	Bytes int64
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

// AddBytes counts bytes written around the ResponseWriter (see
// RecordFields.Bytes).
func (r *Record) AddBytes(n int64) {
	r.mu.Lock()
	r.Bytes += n
	r.mu.Unlock()
}

// SetRoute sets the route label.
func (r *Record) SetRoute(route string) {
	r.mu.Lock()
	r.Route = route
	r.mu.Unlock()
}

// SetStart records the RPC a request calls and its request id, as soon as
// they are known: an event stream's line has them even when the stream's
// end is not recorded in time.
func (r *Record) SetStart(rpc, requestID string) {
	r.mu.Lock()
	r.RPC, r.RequestID = rpc, requestID
	r.mu.Unlock()
}

// SetCall records the outcome of the request's RPC: everything but the
// route.
func (r *Record) SetCall(rpc, code, requestID, keyID, world, user, errMessage string) {
	r.mu.Lock()
	r.RPC, r.Code, r.RequestID, r.KeyID = rpc, code, requestID, keyID
	r.World, r.User, r.Error = world, user, errMessage
	r.mu.Unlock()
}

// Fields returns a copy of the record's fields.
func (r *Record) Fields() RecordFields {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.RecordFields
}

// Detach tells the access middleware that the answer goes on after the
// handler returns (an event stream that took its connection over): the
// request's line and metrics then wait for the returned function, which
// the answer's owner calls once, when the answer ended. The line records
// the whole answer's duration, bytes and outcome. The function holds
// nothing of the request.
func (r *Record) Detach() (ended func(DetachedEnd)) {
	d := &detachedAnswer{}
	r.mu.Lock()
	r.detached = d
	r.mu.Unlock()
	return d.end
}

// detachedAnswer is the end of a detached answer: tail is its outcome once
// it came; written, set by the middleware once the handler returned,
// writes the line.
type detachedAnswer struct {
	mu      sync.Mutex
	tail    *DetachedEnd
	written func(DetachedEnd)
}

// end records the answer's end and writes its line when the middleware is
// done with the handler.
func (d *detachedAnswer) end(end DetachedEnd) {
	d.mu.Lock()
	if d.tail != nil {
		d.mu.Unlock()
		return
	}
	d.tail = &end
	write := d.written
	d.written = nil
	d.mu.Unlock()
	if write != nil {
		write(end)
	}
}

// detachedAnswer returns the record's detached answer, or nil.
func (r *Record) detachedAnswer() *detachedAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.detached
}

// whenEnded calls write with the end of the detached answer: now, when it
// ended already, or when it ends.
func (d *detachedAnswer) whenEnded(write func(DetachedEnd)) {
	d.mu.Lock()
	if d.tail == nil {
		d.written = write
		d.mu.Unlock()
		return
	}
	end := *d.tail
	d.mu.Unlock()
	write(end)
}
