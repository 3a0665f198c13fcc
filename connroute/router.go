// Package connroute shares one listening port between the relay's HTTP
// server and grpc-go's own HTTP/2 transport, by routing each connection on
// what its client sends first.
//
// gRPC calls could all go through the HTTP server (grpc.Server.ServeHTTP),
// but that compatibility path costs about two and a half times the CPU of
// grpc-go's own transport per call. The router instead looks at each new
// connection before any server sees it:
//
//   - a connection that does not open with the HTTP/2 client preface is
//     HTTP/1.x (or garbage) and goes to the HTTP server;
//   - an HTTP/2 connection without TLS (h2c, "prior knowledge") goes to the
//     gRPC transport when its first request's HEADERS frame has a gRPC
//     content type (`application/grpc`, `application/grpc+proto`, ...), and
//     to the HTTP server otherwise (REST and event streams over h2c).
//
// A connection keeps the server it was given: a REST request on a
// connection whose first request was gRPC is refused by the gRPC transport
// (HTTP 415), and the HTTP server passes the gRPC requests of a connection
// whose first request was REST to the compatibility path. Clients normally
// keep one kind per connection.
//
// grpc-go clients (like grpc-java's) send their first request only once
// they have read the server's SETTINGS frame, so the router must answer
// before it can know where the connection goes: it sends an empty SETTINGS
// frame (every setting at its protocol default, what a client assumes
// until it hears otherwise) right after the client's preface. The server
// the connection goes to then sends its own SETTINGS, which the client
// applies on top, as HTTP/2 allows. The client acknowledges both; the
// router removes the acknowledgement of its own from what it passes on, so
// that the server sees exactly the acknowledgements of the settings it sent
// (net/http's HTTP/2 server closes a connection that acknowledges settings
// it never sent).
//
// A connection must show what it is (for HTTP/1.x its first byte, for h2c
// its preface and its first request's headers) within Config.HeaderTimeout,
// or it is closed, as the HTTP server closes a connection whose request
// headers are late.
package connroute

import (
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Config configures a [Router].
type Config struct {
	// HeaderTimeout bounds how long a new connection may take to show what
	// it is (see the package documentation); 0 means no bound.
	HeaderTimeout time.Duration
	// Direct, when set, reports the connections that go to the gRPC
	// transport without being looked at: those of a port that serves gRPC
	// only.
	Direct func(net.Conn) bool
	// Log receives accept errors; nil logs nothing.
	Log *slog.Logger
}

// Router accepts the connections of one listener and hands each to the
// listener of its server: [Router.GRPC] or [Router.HTTP].
type Router struct {
	inner net.Listener
	cfg   Config
	grpc  *endpoint
	http  *endpoint

	// done is closed when the inner listener stops accepting; err is why.
	done      chan struct{}
	err       error
	closeOnce sync.Once
}

// New starts routing the connections of inner.
func New(inner net.Listener, cfg Config) *Router {
	r := &Router{inner: inner, cfg: cfg, done: make(chan struct{})}
	r.grpc = newEndpoint(r)
	r.http = newEndpoint(r)
	go r.accept()
	return r
}

// GRPC is the listener of the connections for the gRPC transport.
func (r *Router) GRPC() net.Listener { return r.grpc }

// HTTP is the listener of the connections for the HTTP server.
func (r *Router) HTTP() net.Listener { return r.http }

// Addr is the address of the inner listener.
func (r *Router) Addr() net.Addr { return r.inner.Addr() }

// Close stops accepting connections: both listeners then answer Accept
// with net.ErrClosed. Connections already handed out stay open.
func (r *Router) Close() error {
	return r.inner.Close()
}

// accept hands each connection of the inner listener to route, until the
// inner listener fails.
func (r *Router) accept() {
	var backoff time.Duration
	for {
		c, err := r.inner.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				r.stop(net.ErrClosed)
				return
			}
			// Anything else (out of file descriptors, mostly) passes:
			// wait a little, as net/http does, and accept again.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if r.cfg.Log != nil {
				r.cfg.Log.Warn("accepting a connection failed; retrying", "error", err, "retryIn", backoff)
			}
			select {
			case <-time.After(backoff):
			case <-r.done:
				return
			}
			continue
		}
		backoff = 0
		go r.route(c)
	}
}

// stop ends both listeners with err.
func (r *Router) stop(err error) {
	r.closeOnce.Do(func() {
		r.err = err
		close(r.done)
	})
}

// route finds a connection's server and hands the connection to it.
func (r *Router) route(c net.Conn) {
	if r.cfg.Direct != nil && r.cfg.Direct(c) {
		r.grpc.deliver(c)
		return
	}
	if r.cfg.HeaderTimeout > 0 {
		_ = c.SetReadDeadline(time.Now().Add(r.cfg.HeaderTimeout))
	}
	toGRPC, routed, err := sniff(c)
	if err != nil {
		// Silent past the time-out, closed, or broken: nobody to answer.
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if toGRPC {
		r.grpc.deliver(routed)
	} else {
		r.http.deliver(routed)
	}
}

// endpoint is the listener of one server: it hands out the connections
// routed to it.
type endpoint struct {
	r         *Router
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newEndpoint(r *Router) *endpoint {
	return &endpoint{r: r, conns: make(chan net.Conn), closed: make(chan struct{})}
}

// Accept returns the next connection routed to this server.
func (e *endpoint) Accept() (net.Conn, error) {
	select {
	case c := <-e.conns:
		return c, nil
	case <-e.closed:
		return nil, net.ErrClosed
	case <-e.r.done:
		return nil, e.r.err
	}
}

// Close stops this server's share: connections routed to it afterwards are
// closed. The router and the other server go on.
func (e *endpoint) Close() error {
	e.closeOnce.Do(func() { close(e.closed) })
	return nil
}

// Addr is the shared port's address.
func (e *endpoint) Addr() net.Addr { return e.r.inner.Addr() }

// deliver hands c to the server, or closes it when the server stopped
// accepting.
func (e *endpoint) deliver(c net.Conn) {
	select {
	case e.conns <- c:
	case <-e.closed:
		_ = c.Close()
	case <-e.r.done:
		_ = c.Close()
	}
}
