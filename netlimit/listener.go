// Package netlimit bounds what clients can hold of the relay below HTTP
// routing: how many connections are open at once, overall and per client
// address; how long a write to a client may make no progress; and how
// slowly a request body may arrive.
//
// Each connection costs the relay a file descriptor and a goroutine, and
// net/http alone holds a connection as long as its client keeps it busy: a
// client that sends its headers and then trickles its body a byte at a
// time, or that never reads its answer, is held forever, and a few
// thousand of them use up the process's file descriptors so that nobody
// else is answered. The relay closes that room from three sides:
//
//   - [Listener] caps the connections open at once, overall and per client
//     address, so that no client, however patient, holds more than its
//     share and the process keeps descriptors for its own files. A
//     connection over a cap is refused at once with a 503 and Retry-After,
//     and counted. Its connections also bound how long a write may stall
//     (a client that stops reading its answer or its stream).
//   - [BodyGuard] gives every request body a read deadline that moves
//     forward as its bytes arrive: a body must keep arriving at a minimum
//     rate, however long it is, so that large uploads at a reasonable
//     rate succeed while a trickle is cut off.
//   - The http.Server's own ReadHeaderTimeout and IdleTimeout (configured
//     by the caller) bound the headers and idle keep-alive connections,
//     for HTTP/1.1 and HTTP/2 alike.
//
// Long-lived responses (Server-Sent Events, gRPC streams) have no body to
// read once their request is in, so no read deadline holds them; they are
// cut only when their client stops reading for longer than the write
// stall time-out.
package netlimit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabletop-relay/relay/wire"
)

// DefaultMaxConnsPerIP is the default cap on the connections open at once
// from one client address.
const DefaultMaxConnsPerIP = 512

// DefaultWriteStallTimeout is the default of [Config.WriteStallTimeout].
const DefaultWriteStallTimeout = 60 * time.Second

// RetryAfter is the Retry-After, in seconds, of a refused connection's 503:
// slots come free as other connections end, which takes no longer than a
// moment under normal load.
const RetryAfter = 1

// Config configures a [Listener].
type Config struct {
	// MaxConns bounds the connections open at once; 0 means no bound.
	MaxConns int
	// MaxConnsPerIP bounds the connections open at once from one client
	// address: an IPv4 address, or an IPv6 /64 (the block one host
	// usually holds); 0 means no bound.
	MaxConnsPerIP int
	// WriteStallTimeout is the longest a write to a connection may make no
	// progress before it fails, which ends the connection: a client that
	// stops reading its answer or its event stream. 0 means no bound.
	WriteStallTimeout time.Duration
	// NewRequestID, when set, gives the request id of a refusal's error
	// body, as for every other error of the API.
	NewRequestID func(operation string) string
	// Log receives a summary of refused connections, at most once a
	// minute; nil logs nothing.
	Log *slog.Logger
}

// Stats counts a [Listener]'s connections.
type Stats struct {
	// Open is the number of connections open now.
	Open int
	// RefusedOverall counts the connections refused because MaxConns
	// were open.
	RefusedOverall uint64
	// RefusedPerIP counts the connections refused because their client
	// address had MaxConnsPerIP open.
	RefusedPerIP uint64
}

// Listener is a net.Listener that caps the connections open at once,
// overall and per client address, and bounds how long writes to them may
// stall (see [Config]).
//
// A connection over a cap is never handed to the server: Accept answers it
// with an HTTP/1.1 503 and Retry-After (an HTTP/2 client sees the
// connection fail, which gRPC clients retry), closes it, counts it and
// accepts the next. At most maxRefusing refusals are answered at once, each
// within refuseLinger; past that, refused connections are closed without an
// answer, so that a flood of them costs no more descriptors than the cap.
type Listener struct {
	net.Listener
	cfg Config

	mu    sync.Mutex
	open  int
	perIP map[netip.Addr]int

	refusing       chan struct{}
	refusedOverall atomic.Uint64
	refusedPerIP   atomic.Uint64
	logMu          sync.Mutex
	lastLog        time.Time
}

// Tuning of refusals.
const (
	// maxRefusing bounds the refusals answered at once.
	maxRefusing = 64
	// refuseLinger bounds how long a refused connection is kept to
	// answer it and read what its client sends before it closes.
	refuseLinger = 500 * time.Millisecond
	// refuseDrainBytes bounds what is read from a refused connection.
	refuseDrainBytes = 64 << 10
	// refusalLogEvery is the least time between two logged summaries of
	// refusals.
	refusalLogEvery = time.Minute
)

// Listen wraps inner in a Listener with the limits of cfg.
func Listen(inner net.Listener, cfg Config) *Listener {
	return &Listener{
		Listener: inner,
		cfg:      cfg,
		perIP:    make(map[netip.Addr]int),
		refusing: make(chan struct{}, maxRefusing),
	}
}

// Accept returns the next connection within the caps; it refuses the
// others itself (see [Listener]).
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := clientAddr(c.RemoteAddr())
		if reason := l.admit(addr); reason != admitted {
			l.refuse(c, reason)
			continue
		}
		lc := &conn{Conn: c, l: l, addr: addr, stall: l.cfg.WriteStallTimeout}
		return lc, nil
	}
}

// Stats returns the listener's counts.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open := l.open
	l.mu.Unlock()
	return Stats{Open: open, RefusedOverall: l.refusedOverall.Load(), RefusedPerIP: l.refusedPerIP.Load()}
}

// admission is the outcome of admit.
type admission int

const (
	admitted admission = iota
	overOverall
	overPerIP
)

// admit takes a slot for a connection from addr, or says which cap is
// full.
func (l *Listener) admit(addr netip.Addr) admission {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cfg.MaxConns > 0 && l.open >= l.cfg.MaxConns {
		return overOverall
	}
	if l.cfg.MaxConnsPerIP > 0 && l.perIP[addr] >= l.cfg.MaxConnsPerIP {
		return overPerIP
	}
	l.open++
	l.perIP[addr]++
	return admitted
}

// release gives back a connection's slot.
func (l *Listener) release(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.perIP[addr] - 1; n > 0 {
		l.perIP[addr] = n
	} else {
		delete(l.perIP, addr)
	}
}

// refuse counts and answers a connection over a cap, in the background, or
// closes it at once when too many refusals are being answered already.
func (l *Listener) refuse(c net.Conn, reason admission) {
	if reason == overOverall {
		l.refusedOverall.Add(1)
	} else {
		l.refusedPerIP.Add(1)
	}
	l.logRefusals()
	select {
	case l.refusing <- struct{}{}:
		go func() {
			defer func() { <-l.refusing }()
			l.answer(c, reason)
		}()
	default:
		_ = c.Close()
	}
}

// answer writes the 503 of a refused connection and closes it. It first
// shuts its side down and reads what the client sends until the client
// closes (or refuseLinger passes): closing with unread data would reset
// the connection, and a reset may destroy the answer before the client
// reads it.
func (l *Listener) answer(c net.Conn, reason admission) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(refuseLinger))
	// Wait for the request's head first: an HTTP client that receives an
	// answer before it has sent its request takes it for an unsolicited
	// one on a broken connection, and reports an error instead of the 503.
	awaitRequestHead(c)
	if _, err := c.Write(l.refusal(reason)); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, refuseDrainBytes))
}

// awaitRequestHead reads from c until the end of an HTTP/1.1 request head
// (an empty line), refuseDrainBytes, an error or c's deadline, whichever
// comes first.
func awaitRequestHead(c net.Conn) {
	buf := make([]byte, 4096)
	var seen []byte
	for len(seen) < refuseDrainBytes {
		n, err := c.Read(buf)
		seen = append(seen, buf[:n]...)
		if bytes.Contains(seen, []byte("\r\n\r\n")) || err != nil {
			return
		}
	}
}

// refusal builds the HTTP/1.1 answer to a refused connection: 503 with
// Retry-After and the API's error body.
func (l *Listener) refusal(reason admission) []byte {
	msg := "Too many connections to the relay: retry later"
	if reason == overPerIP {
		msg = fmt.Sprintf("Too many connections from your address: the limit is %d open at once; retry later", l.cfg.MaxConnsPerIP)
	}
	requestID := ""
	if l.cfg.NewRequestID != nil {
		requestID = l.cfg.NewRequestID(wire.ErrorOperation)
	}
	// The API's error body, {"type", "requestId", "error"}, in that order.
	field := func(name, value string) string {
		v, _ := json.Marshal(value)
		return strconv.Quote(name) + ":" + string(v)
	}
	body := []byte("{" + field(wire.EnvelopeType, wire.ErrorOperation+wire.ResultSuffix) + "," +
		field(wire.EnvelopeRequestID, requestID) + "," + field(wire.EnvelopeError, msg) + "}")
	head := "HTTP/1.1 503 Service Unavailable\r\n" +
		"Content-Type: application/json\r\n" +
		"Retry-After: " + strconv.Itoa(RetryAfter) + "\r\n" +
		"Connection: close\r\n"
	if requestID != "" {
		head += http.CanonicalHeaderKey(wire.RequestIDHeader) + ": " + requestID + "\r\n"
	}
	head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	return append([]byte(head), body...)
}

// logRefusals logs the refusal counts, at most once every refusalLogEvery:
// a flood of refusals must not become a flood of log lines.
func (l *Listener) logRefusals() {
	if l.cfg.Log == nil {
		return
	}
	l.logMu.Lock()
	now := time.Now()
	due := l.lastLog.IsZero() || now.Sub(l.lastLog) >= refusalLogEvery
	if due {
		l.lastLog = now
	}
	l.logMu.Unlock()
	if due {
		s := l.Stats()
		l.cfg.Log.Warn("refusing connections over the connection caps",
			"open", s.Open, "refusedOverall", s.RefusedOverall, "refusedPerIP", s.RefusedPerIP,
			"maxConns", l.cfg.MaxConns, "maxConnsPerIP", l.cfg.MaxConnsPerIP)
	}
}

// clientAddr is the address a connection counts against for the per-address
// cap: its IP address, with IPv4-mapped IPv6 addresses as IPv4 and IPv6
// addresses reduced to their /64, since one host usually holds a whole /64
// and could otherwise open each connection from a fresh address.
func clientAddr(a net.Addr) netip.Addr {
	var ip netip.Addr
	if tcp, ok := a.(*net.TCPAddr); ok {
		ip, _ = netip.AddrFromSlice(tcp.IP)
	} else if ap, err := netip.ParseAddrPort(a.String()); err == nil {
		ip = ap.Addr()
	}
	return group(ip)
}

// group reduces an address to the block its host is counted by: IPv4
// (IPv4-mapped IPv6 included) as it is, IPv6 to its /64.
func group(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		ip = netip.PrefixFrom(ip, 64).Masked().Addr()
	}
	return ip
}

// AddressKey is the key a per-address limit counts a client under, from
// its address (a host, or host:port): the same grouping as the connection
// caps, an IPv6 address by its /64 ("2001:db8:1:2::/64"), since one host
// usually holds a whole /64 and could otherwise take a fresh allowance
// with each address. What is not an IP address is its own key.
func AddressKey(addr string) string {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = group(ip)
	if ip.Is6() {
		return ip.String() + "/64"
	}
	return ip.String()
}

// conn is an accepted connection: it gives its slot back when closed and
// bounds how long its writes may stall.
type conn struct {
	net.Conn
	l      *Listener
	addr   netip.Addr
	closed atomic.Bool
	// stall is the write stall time-out (0: none); armed is when the
	// write deadline was last pushed forward, in Unix nanoseconds.
	stall time.Duration
	armed atomic.Int64

	// holdMu guards hold and held. While hold is set, the next write is
	// kept in held (copied: net/http reuses its buffer) and sent together
	// with the write after it; see HoldNextWrite.
	holdMu sync.Mutex
	hold   bool
	held   []byte
	// vec and bufs are writeWithHeld's vector, kept with the connection
	// so that building it allocates nothing. Under holdMu.
	vec  [2][]byte
	bufs net.Buffers
}

// maxHeldWrite is the largest write a connection keeps back to send with
// the next one: net/http's connection buffer (4 KiB) with room to spare;
// a larger write goes out at once.
const maxHeldWrite = 8 << 10

// HoldNextWrite makes the connection keep its next write (when it is at
// most maxHeldWrite bytes) and send it with the write after it, in one
// system call (writev). net/http sends an answer longer than its 4 KiB
// connection buffer in two writes: the buffer, holding the headers and
// the body's start, then the rest of the body; held together they leave
// in one, so the client wakes once and the relay makes one system call.
// Whoever asks must call ReleaseHeld when the answer is written, which
// sends a write still kept. The holding ends after one pair of writes.
func (c *conn) HoldNextWrite() {
	c.holdMu.Lock()
	c.hold = true
	c.holdMu.Unlock()
}

// ReleaseHeld ends HoldNextWrite: a write still kept is sent now.
func (c *conn) ReleaseHeld() error {
	c.holdMu.Lock()
	defer c.holdMu.Unlock()
	c.hold = false
	if len(c.held) == 0 {
		return nil
	}
	held := c.held
	c.held = c.held[:0]
	_, err := c.write(held)
	return err
}

// writeChunk bounds what one write hands the network at once, so that a
// write that keeps making progress, however large, keeps pushing its
// deadline forward.
const writeChunk = 64 << 10

// Write writes p, or keeps it to send with the next write after
// HoldNextWrite.
func (c *conn) Write(p []byte) (int, error) {
	c.holdMu.Lock()
	if !c.hold {
		c.holdMu.Unlock()
		return c.write(p)
	}
	defer c.holdMu.Unlock()
	if len(c.held) == 0 && len(p) <= maxHeldWrite {
		if c.held == nil {
			c.held = make([]byte, 0, maxHeldWrite)
		}
		c.held = append(c.held, p...)
		return len(p), nil
	}
	c.hold = false
	if len(c.held) == 0 {
		return c.write(p)
	}
	return c.writeWithHeld(p)
}

// writeWithHeld sends the kept write and p in one system call, and
// reports how much of p went out. Under holdMu.
func (c *conn) writeWithHeld(p []byte) (int, error) {
	held := c.held
	c.held = c.held[:0]
	if len(held)+len(p) > writeChunk {
		// Too long for one guarded write: one after the other.
		if _, err := c.write(held); err != nil {
			return 0, err
		}
		return c.write(p)
	}
	if c.stall > 0 {
		if now := time.Now(); now.UnixNano()-c.armed.Load() > int64(c.stall/8) {
			if err := c.arm(now); err != nil {
				return 0, err
			}
		}
	}
	// net.Buffers writes with writev when the connection is a socket.
	c.vec = [2][]byte{held, p}
	c.bufs = c.vec[:]
	n, err := c.bufs.WriteTo(c.Conn)
	// The caller's buffer is not kept past its write.
	c.vec, c.bufs = [2][]byte{}, nil
	return int(max(0, n-int64(len(held)))), err
}

// write writes p in chunks of at most writeChunk, each of which must go out
// within the write stall time-out. The deadline is pushed forward only when
// it was last set more than an eighth of the time-out ago (a stall is then
// cut after 7/8 to 8/8 of the time-out), which spares a deadline update on
// most writes.
func (c *conn) write(p []byte) (int, error) {
	if c.stall <= 0 {
		return c.Conn.Write(p)
	}
	written := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), writeChunk)]
		if now := time.Now(); now.UnixNano()-c.armed.Load() > int64(c.stall/8) {
			if err := c.arm(now); err != nil {
				return written, err
			}
		}
		n, err := c.Conn.Write(chunk)
		written += n
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// arm sets the write deadline one stall time-out after now.
func (c *conn) arm(now time.Time) error {
	c.armed.Store(now.UnixNano())
	return c.Conn.SetWriteDeadline(now.Add(c.stall))
}

// SetWriteDeadline sets the write deadline. Under a write stall time-out
// the deadline belongs to the stall guard: clearing it (as the event
// streams do, to lift any server-wide write time-out) restarts the guard's
// deadline instead, since a write without one could block forever; a
// deadline that is set holds until the guard next pushes its own forward.
func (c *conn) SetWriteDeadline(t time.Time) error {
	if c.stall <= 0 {
		return c.Conn.SetWriteDeadline(t)
	}
	if t.IsZero() {
		return c.arm(time.Now())
	}
	c.armed.Store(time.Now().UnixNano())
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets the read and write deadlines, the latter as
// SetWriteDeadline does.
func (c *conn) SetDeadline(t time.Time) error {
	if err := c.Conn.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

// CloseWrite shuts down the writing side, as net/http does before closing
// an HTTP/1.1 connection so that its last answer is not lost to a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// PlainConn returns the connection accepted, to which this one writes
// unchanged: an event stream writes to it without blocking, so no write
// of it can stall (see gateway.pushSink).
func (c *conn) PlainConn() net.Conn { return c.Conn }

// Close closes the connection and gives its slot back, once.
func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.closed.CompareAndSwap(false, true) {
		c.l.release(c.addr)
	}
	return err
}
