package jstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// routeProxy carries the NATS route connections that one server opens to
// another, so that a test can cut them as a dead machine or a lost network
// would: without a word to the other side.
type routeProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newRouteProxy listens on addr and forwards each connection to target,
// until the test ends.
func newRouteProxy(t testing.TB, addr, target string) *routeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("route proxy on %s: %v", addr, err)
	}
	p := &routeProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *routeProxy) addr() string { return p.ln.Addr().String() }

func (p *routeProxy) serve() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			in.Close()
			continue
		}
		if !p.track(in, out) {
			continue
		}
		p.wg.Add(2)
		go p.pipe(in, out)
		go p.pipe(out, in)
	}
}

// track remembers a connection's two ends, or closes them when the proxy
// was cut.
func (p *routeProxy) track(in, out net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		in.Close()
		out.Close()
		return false
	}
	p.conns[in] = struct{}{}
	p.conns[out] = struct{}{}
	return true
}

// pipe copies from one end to the other until either closes.
func (p *routeProxy) pipe(from, to net.Conn) {
	defer p.wg.Done()
	_, _ = io.Copy(to, from)
	from.Close()
	to.Close()
}

// cutOff closes every connection the proxy carries and refuses new ones.
func (p *routeProxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *routeProxy) close() {
	p.ln.Close()
	p.cutOff()
	p.wg.Wait()
}
