package netlimit

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"
)

// acceptor serves a Listener in the background and keeps every connection
// it hands out.
type acceptor struct {
	l     *Listener
	conns chan net.Conn
}

func newAcceptor(t *testing.T, cfg Config) *acceptor {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := &acceptor{l: Listen(inner, cfg), conns: make(chan net.Conn, 100)}
	go func() {
		for {
			c, err := a.l.Accept()
			if err != nil {
				return
			}
			a.conns <- c
		}
	}()
	t.Cleanup(func() {
		a.l.Close()
		for {
			select {
			case c := <-a.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return a
}

// accepted waits for the next connection the listener hands out.
func (a *acceptor) accepted(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-a.conns:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// dialFrom connects to the listener from a loopback address; it skips the
// test when the system has no such address (only Linux routes all of
// 127.0.0.0/8 to the loopback interface).
func dialFrom(t *testing.T, a *acceptor, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", a.l.Addr().String())
	if err != nil {
		if from != "127.0.0.1" {
			t.Skipf("cannot connect from %s: %v", from, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// refused reads the answer to a refused connection: a 503 with
// Retry-After and the API's error body, then the end of the connection.
func refused(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: relay\r\n\r\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a refused connection: %v", err)
	}
	defer resp.Body.Close()
	var body struct{ Type, RequestID, Error string }
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("refusal body: %v", err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || body.Type != "error-result" || body.RequestID != "error_1" {
		t.Fatalf("refusal: %d Retry-After %q %+v", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp.Header.Get("X-Request-Id") != body.RequestID {
		t.Fatalf("X-Request-Id %q, body %q", resp.Header.Get("X-Request-Id"), body.RequestID)
	}
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("the refused connection stays open")
	}
	return body.Error
}

func TestListenerCaps(t *testing.T) {
	t.Parallel()
	a := newAcceptor(t, Config{MaxConns: 4, MaxConnsPerIP: 2, NewRequestID: func(op string) string { return op + "_1" }})
	dialFrom(t, a, "127.0.0.1")
	dialFrom(t, a, "127.0.0.1")
	first := a.accepted(t)
	a.accepted(t)
	// A third connection from the same address is refused; the first two
	// are untouched.
	if msg := refused(t, dialFrom(t, a, "127.0.0.1")); msg != "Too many connections from your address: the limit is 2 open at once; retry later" {
		t.Fatalf("per-address refusal: %q", msg)
	}
	if s := a.l.Stats(); s.Open != 2 || s.RefusedPerIP != 1 || s.RefusedOverall != 0 {
		t.Fatalf("stats after a per-address refusal: %+v", s)
	}
	// Other addresses have their own share, up to the overall cap.
	dialFrom(t, a, "127.0.0.2")
	dialFrom(t, a, "127.0.0.3")
	a.accepted(t)
	a.accepted(t)
	if msg := refused(t, dialFrom(t, a, "127.0.0.4")); msg != "Too many connections to the relay: retry later" {
		t.Fatalf("overall refusal: %q", msg)
	}
	if s := a.l.Stats(); s.Open != 4 || s.RefusedPerIP != 1 || s.RefusedOverall != 1 {
		t.Fatalf("stats after an overall refusal: %+v", s)
	}
	// Closing a connection gives its slot back, once.
	first.Close()
	first.Close()
	if s := a.l.Stats(); s.Open != 3 {
		t.Fatalf("open after a close: %+v", s)
	}
	dialFrom(t, a, "127.0.0.1")
	a.accepted(t)
	if s := a.l.Stats(); s.Open != 4 {
		t.Fatalf("open after a new connection: %+v", s)
	}
}

func TestListenerNoCaps(t *testing.T) {
	t.Parallel()
	a := newAcceptor(t, Config{})
	for range 20 {
		dialFrom(t, a, "127.0.0.1")
		a.accepted(t)
	}
	if s := a.l.Stats(); s.Open != 20 || s.RefusedOverall+s.RefusedPerIP != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestListenerRefusalsBounded: with maxRefusing refusals being answered, a
// further refused connection is closed at once, without an answer or a
// goroutine of its own.
func TestListenerRefusalsBounded(t *testing.T) {
	t.Parallel()
	a := newAcceptor(t, Config{MaxConns: 1})
	dialFrom(t, a, "127.0.0.1")
	a.accepted(t)
	for range maxRefusing {
		a.l.refusing <- struct{}{}
	}
	c := dialFrom(t, a, "127.0.0.1")
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("read from a refused connection: %d %v", n, err)
	}
	if s := a.l.Stats(); s.RefusedOverall != 1 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestClientAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:4000", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:4000", "192.0.2.7"},
		{"[2001:db8:1:2:3:4:5:6]:4000", "2001:db8:1:2::"},
		{"[2001:db8:1:2:ffff::1]:4000", "2001:db8:1:2::"},
		{"[fe80::1%eth0]:4000", "fe80::"},
	} {
		ap := netip.MustParseAddrPort(tc.addr)
		tcp := &net.TCPAddr{IP: ap.Addr().AsSlice(), Port: int(ap.Port()), Zone: ap.Addr().Zone()}
		if got := clientAddr(tcp); got.String() != tc.want {
			t.Errorf("clientAddr(%s) = %s, want %s", tc.addr, got, tc.want)
		}
		if got := clientAddr(stringAddr(tc.addr)); got.String() != tc.want {
			t.Errorf("clientAddr(%q) = %s, want %s", tc.addr, got, tc.want)
		}
	}
}

// stringAddr is a net.Addr known only by its text.
type stringAddr string

func (a stringAddr) Network() string { return "tcp" }
func (a stringAddr) String() string  { return string(a) }

func TestDefaultMaxConns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		limit uint64
		want  int
	}{{0, fallbackMaxConns}, {1024, 768}, {20000, 15000}, {16, minDefaultMaxConns}, {^uint64(0), maxDefaultMaxConns}} {
		if got := defaultMaxConns(tc.limit); got != tc.want {
			t.Errorf("defaultMaxConns(%d) = %d, want %d", tc.limit, got, tc.want)
		}
	}
	if n := DefaultMaxConns(); n < minDefaultMaxConns {
		t.Fatalf("DefaultMaxConns() = %d", n)
	}
}

// TestWriteStall: a write to a client that stops reading fails once it
// made no progress for the stall time-out, while a long write to a slow
// but steady reader succeeds.
func TestWriteStall(t *testing.T) {
	t.Parallel()
	const stall = time.Second

	t.Run("stalled", func(t *testing.T) {
		t.Parallel()
		a := newAcceptor(t, Config{WriteStallTimeout: stall})
		dialFrom(t, a, "127.0.0.1") // never reads
		c := a.accepted(t)
		c.Write([]byte("x"))
		// Clearing the deadline, as the event streams do, leaves the
		// stall guard in place, even for a write that blocks at once.
		c.SetWriteDeadline(time.Time{})
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := c.Write(make([]byte, 256<<20))
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write to a client that does not read: %v", err)
			}
		case <-time.After(stall + 10*time.Second):
			c.Close()
			t.Fatalf("a write to a client that does not read still blocks after %v", time.Since(start))
		}
		if took := time.Since(start); took > stall+5*time.Second {
			t.Fatalf("the stalled write failed only after %v", took)
		}
	})

	t.Run("slow but steady", func(t *testing.T) {
		t.Parallel()
		a := newAcceptor(t, Config{WriteStallTimeout: stall})
		client := dialFrom(t, a, "127.0.0.1")
		client.(*net.TCPConn).SetReadBuffer(64 << 10)
		c := a.accepted(t)
		c.(*conn).Conn.(*net.TCPConn).SetWriteBuffer(64 << 10)
		const size = 1 << 20
		done := make(chan int64)
		go func() {
			// About 400 KiB/s, so 1 MiB takes more than twice the stall
			// time-out while no 64 KiB chunk waits for more than a
			// fraction of it.
			const rate = 400 << 10
			var got int64
			buf := make([]byte, 8<<10)
			begin := time.Now()
			for got < size {
				n, err := client.Read(buf)
				got += int64(n)
				if err != nil {
					break
				}
				time.Sleep(time.Until(begin.Add(time.Duration(got) * time.Second / rate)))
			}
			done <- got
		}()
		start := time.Now()
		if n, err := c.Write(make([]byte, size)); n != size || err != nil {
			t.Fatalf("write to a steady reader: %d %v after %v", n, err, time.Since(start))
		}
		if got := <-done; got != size {
			t.Fatalf("the reader got %d bytes", got)
		}
		t.Logf("1 MiB to a steady reader took %v (stall time-out %v)", time.Since(start), stall)
	})
}

// TestRefusalText keeps the refusal's head well-formed.
func TestRefusalText(t *testing.T) {
	t.Parallel()
	l := Listen(nil, Config{MaxConnsPerIP: 3})
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(l.refusal(overPerIP)))), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Close != true || resp.ContentLength != int64(len(body)) || !strings.Contains(string(body), `"requestId":""`) {
		t.Fatalf("refusal: %+v %s", resp, body)
	}
}

// TestHoldNextWrite checks that a held write leaves only with the write
// after it (both in order), that the holding ends after that pair, that
// ReleaseHeld sends a write still kept, and that a write too long to keep
// goes out at once.
func TestHoldNextWrite(t *testing.T) {
	t.Parallel()
	a := newAcceptor(t, Config{WriteStallTimeout: 5 * time.Second})
	client := dialFrom(t, a, "127.0.0.1")
	c := a.accepted(t).(*conn)
	// nothingArrives checks that the client receives nothing for a moment.
	nothingArrives := func(what string) {
		t.Helper()
		client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		var b [1]byte
		if n, err := client.Read(b[:]); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%s: the client received %d bytes (%v)", what, n, err)
		}
	}
	// arrives checks that the client receives exactly want next.
	arrives := func(want []byte, what string) {
		t.Helper()
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, len(want))
		if _, err := io.ReadFull(client, got); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if string(got) != string(want) {
			t.Fatalf("%s: the client received other bytes", what)
		}
	}
	body := make([]byte, 30<<10)
	for i := range body {
		body[i] = byte('a' + i%26)
	}

	c.HoldNextWrite()
	if n, err := c.Write([]byte("HTTP/1.1 200 OK\r\n\r\nhead")); n != 23 || err != nil {
		t.Fatalf("held write: %d, %v", n, err)
	}
	nothingArrives("a held write")
	if n, err := c.Write(body); n != len(body) || err != nil {
		t.Fatalf("write after the held one: %d, %v", n, err)
	}
	arrives(append([]byte("HTTP/1.1 200 OK\r\n\r\nhead"), body...), "the held write and the next")
	if err := c.ReleaseHeld(); err != nil {
		t.Fatal(err)
	}

	// The holding ended with that pair: the next write leaves at once.
	c.Write([]byte("next"))
	arrives([]byte("next"), "a write after the pair")

	// A write still kept leaves with ReleaseHeld.
	c.HoldNextWrite()
	c.Write([]byte("small answer"))
	nothingArrives("a held write")
	if err := c.ReleaseHeld(); err != nil {
		t.Fatal(err)
	}
	arrives([]byte("small answer"), "a write released")

	// A write too long to keep leaves at once, and so does the next.
	c.HoldNextWrite()
	c.Write(body)
	arrives(body, "a long write while holding")
	c.Write([]byte("tail"))
	arrives([]byte("tail"), "the write after a long one")
	c.ReleaseHeld()
}

func TestAddressKeyGroupsIPv6By64(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:4411":             "192.0.2.7",
		"192.0.2.7":                  "192.0.2.7",
		"[::ffff:192.0.2.7]:80":      "192.0.2.7",
		"[2001:db8:1:2::1]:443":      "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::9]:443": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":            "2001:db8:1:3::/64",
		"[fe80::1%eth0]:1":           "fe80::/64",
		"pipe":                       "pipe",
	} {
		if got := AddressKey(addr); got != want {
			t.Errorf("AddressKey(%q) = %q, want %q", addr, got, want)
		}
	}
}
