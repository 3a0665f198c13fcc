package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// rawStream is an event stream read over a plain HTTP/1.1 connection with
// no goroutine of its own: the test reads it when it chooses, so that the
// relay sees a client that reads late, slowly or never.
type rawStream struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

// openRawStream opens an event stream over HTTP/1.1 and reads its answer's
// head; rcvbuf, when not 0, shrinks the client's socket receive buffer.
// It fails the test unless the answer is 200.
func openRawStream(t *testing.T, addr, path, key string, rcvbuf int) *rawStream {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf)
			}); err != nil {
				return err
			}
			return serr
		}
	}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: relay\r\nX-Api-Key: %s\r\nAccept: text/event-stream\r\n\r\n", path, key); err != nil {
		t.Fatal(err)
	}
	s := &rawStream{t: t, conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(s.r, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: status %d", path, resp.StatusCode)
	}
	return s
}

// next reads the stream's next event (comments skipped) within timeout.
func (s *rawStream) next(timeout time.Duration) (sseFrame, error) {
	_ = s.conn.SetReadDeadline(time.Now().Add(timeout))
	var f sseFrame
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			return f, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if f.event != "" || f.data != "" {
				return f, nil
			}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			f.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			f.event = line[7:]
		case strings.HasPrefix(line, "data: "):
			f.data = line[6:]
		}
	}
}

// expect reads the next event and fails the test unless it is named name.
func (s *rawStream) expect(name string) sseFrame {
	s.t.Helper()
	f, err := s.next(10 * time.Second)
	if err != nil {
		s.t.Fatalf("waiting for %s: %v", name, err)
	}
	if f.event != name {
		s.t.Fatalf("event %q, want %q", f.event, name)
	}
	return f
}

// settledGoroutines returns the process's goroutines once the ones that
// are ending have ended.
func settledGoroutines() int {
	runtime.GC()
	time.Sleep(150 * time.Millisecond)
	return runtime.NumGoroutine()
}

// openSubscriptions reads the relay's relay_event_streams_open metric (the
// relay must have a metrics listener).
func openSubscriptions(t *testing.T, tr *testRelay) int {
	t.Helper()
	rec := httptest.NewRecorder()
	tr.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "relay_event_streams_open "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return int(f)
		}
	}
	t.Fatal("no relay_event_streams_open metric")
	return 0
}

// pollUntil polls cond for up to timeout.
func pollUntil(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); ; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// An idle event stream over HTTP/1.1 holds no goroutine of the relay's,
// and a client that goes away is noticed at once: its connection, its
// subscription and its place under the stream limits are released.
func TestIdleEventStreamsHoldNoGoroutine(t *testing.T) {
	const streams = 40
	tr := startTestRelay(t, func(c *node.Config) { c.MaxStreamsPerKey = streams; c.MetricsListen = "127.0.0.1:0" })
	base := settledGoroutines()
	open := make([]*rawStream, 0, streams)
	for range streams {
		s := openRawStream(t, tr.Addr(), "/hooks/subscribe", tr.AdminKey, 0)
		s.expect("connected")
		open = append(open, s)
	}
	// The test's own clients run no goroutine: whatever is added is the
	// relay's. A few are shared by every stream (the poller and its
	// writers, started on first use).
	if n := settledGoroutines(); n > base+10 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines with %d idle streams open, %d before: streams hold goroutines\n%s", n, streams, base, buf[:runtime.Stack(buf, true)])
	} else {
		t.Logf("%d goroutines with %d idle streams open, %d before", n, streams, base)
	}
	// The streams are open and counted: one more is refused.
	if r := tr.Do("GET", "/hooks/subscribe", tr.AdminKey, nil, nil); r.Status != http.StatusTooManyRequests {
		t.Fatalf("a stream past the limit: %d %s", r.Status, r.Body)
	}
	// Events still reach every one of them.
	tr.setHP(relaytest.AriaUUID, 31)
	for _, s := range open {
		s.expect("updateActor")
	}

	if n := openSubscriptions(t, tr); n != streams {
		t.Fatalf("%d subscriptions open, want %d", n, streams)
	}
	tr.Client.CloseIdleConnections()
	connsOpen := tr.Conns().Stats().Open
	for _, s := range open {
		_ = s.conn.Close()
	}
	if !pollUntil(3*time.Second, func() bool { return openSubscriptions(t, tr) == 0 && tr.Conns().Stats().Open <= connsOpen-streams }) {
		t.Fatalf("3s after the clients left: %d subscriptions open, %d connections of %d", openSubscriptions(t, tr), tr.Conns().Stats().Open, connsOpen)
	}
	// Their places under the limit are free again.
	for range streams {
		openRawStream(t, tr.Addr(), "/hooks/subscribe", tr.AdminKey, 0).expect("connected")
	}
}

// A detached stream whose client reads late gets every event, in order:
// what its socket could not take waits, and goes out as the client reads.
func TestDetachedStreamDeliversInOrderToALateReader(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxBodyBytes = 1 << 20 })
	s := openRawStream(t, tr.Addr(), "/hooks/subscribe?hooks=updateActor", tr.AdminKey, 4<<10)
	s.expect("connected")
	const changes = 40
	blob := strings.Repeat("x", 200<<10)
	// Written while the client reads nothing: far more than the sockets
	// hold.
	for i := range changes {
		tr.write("PUT", "/update", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.test.blob": fmt.Sprintf("<%d>%s", i, blob)}})
	}
	var lastID uint64
	for i := range changes {
		f, err := s.next(10 * time.Second)
		if err != nil {
			t.Fatalf("event %d of %d: %v", i, changes, err)
		}
		if f.event != "updateActor" {
			t.Fatalf("event %d is %q: %.200s", i, f.event, f.data)
		}
		id, err := strconv.ParseUint(f.id, 10, 64)
		if err != nil || id <= lastID {
			t.Fatalf("event %d has id %q after %d", i, f.id, lastID)
		}
		lastID = id
		if !strings.Contains(f.data, fmt.Sprintf("<%d>", i)) {
			t.Fatalf("event %d carries another change: %.200s", i, f.data)
		}
		if i%8 == 0 {
			time.Sleep(20 * time.Millisecond) // a slow reader
		}
	}
}

// A detached stream whose client stops reading is cut off after the write
// stall time-out: its connection and subscription are released.
func TestDetachedStreamStalledReaderIsCutOff(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) {
		c.WriteStallTimeout = 400 * time.Millisecond
		c.MaxBodyBytes = 1 << 20
		c.MaxStreamsPerKey = 1
		c.MetricsListen = "127.0.0.1:0"
	})
	s := openRawStream(t, tr.Addr(), "/hooks/subscribe?hooks=updateActor", tr.AdminKey, 4<<10)
	s.expect("connected")
	// Far more than the sockets hold, and far fewer events than the
	// subscription's queue: only the stall can end the stream.
	blob := strings.Repeat("x", 256<<10)
	for i := range 40 {
		tr.write("PUT", "/update", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.test.blob": fmt.Sprint(i, blob)}})
	}
	if !pollUntil(5*time.Second, func() bool { return openSubscriptions(t, tr) == 0 }) {
		t.Fatalf("a client that reads nothing still holds its stream 5s after a 400ms stall limit")
	}
	// The stream's place is free again (the limit is one stream).
	openRawStream(t, tr.Addr(), "/hooks/subscribe", tr.AdminKey, 0).expect("connected")
	// What the client finally reads ends: the connection is closed.
	_ = s.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	var sink bytes.Buffer
	if _, err := sink.ReadFrom(s.r); err != nil {
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Fatal("the stalled stream's connection was not closed")
		}
	}
}

// A detached stream ends when the relay stops.
func TestDetachedStreamEndsWhenTheRelayStops(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	s := openRawStream(t, tr.Addr(), "/scene/subscribe", tr.AdminKey, 0)
	s.expect("connected")
	// The stop runs on a context of its own: the test's is cancelled as
	// soon as the test returns, which would cut the stop short and fail
	// the clean-up's close.
	closed := make(chan error, 1)
	go func() { closed <- tr.Close(context.Background()) }()
	for {
		if _, err := s.next(5 * time.Second); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the stream is still open 5s after the relay began to stop")
			}
			if err := <-closed; err != nil {
				t.Fatalf("stop the relay: %v", err)
			}
			return
		}
	}
}

// The relay's memory per idle event stream (SSE over HTTP/1.1): the heap
// and stacks of the process after a collection, with every stream open
// and idle, less before, divided by the streams. The clients are bare
// sockets that hold no memory of the Go runtime. RELAY_IDLE_STREAMS sets
// how many (default 1000; each takes two descriptors of this process).
// RELAY_IDLE_HEAP_PROFILE names a file for the heap profile with every
// stream open. Figures are taken on a shared machine: they are for
// relative use.
func TestIdleEventStreamMemory(t *testing.T) {
	if os.Getenv("RELAY_IDLE_HEAP_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("RELAY_IDLE_STREAMS")); err == nil && v > 0 {
		n = v
	}
	tr := startTestRelay(t, func(c *node.Config) { c.MaxStreamsPerKey = n + 10; c.MaxStreamsPerWorld = n + 10 })
	port := tr.Addr()[strings.LastIndexByte(tr.Addr(), ':')+1:]
	portNum, _ := strconv.Atoi(port)
	// A first stream starts what every stream shares (the poller).
	first := openRawStream(t, tr.Addr(), "/hooks/subscribe", tr.AdminKey, 0)
	first.expect("connected")
	before := memInUse()
	stackBefore := stackInUse()
	fds := make([]int, 0, n)
	t.Cleanup(func() {
		for _, fd := range fds {
			_ = syscall.Close(fd)
		}
	})
	request := []byte("GET /hooks/subscribe HTTP/1.1\r\nHost: relay\r\nX-Api-Key: " + tr.AdminKey + "\r\n\r\n")
	buf := make([]byte, 4096)
	for range n {
		fd, err := bareStream(portNum, request, buf)
		if err != nil {
			t.Fatalf("after %d streams: %v", len(fds), err)
		}
		fds = append(fds, fd)
	}
	after := memInUse()
	if path := os.Getenv("RELAY_IDLE_HEAP_PROFILE"); path != "" {
		// The heap with every stream open, for `go tool pprof`.
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := pprof.WriteHeapProfile(f); err != nil {
			t.Fatal(err)
		}
		_ = f.Close()
	}
	perStream := float64(after-before) / float64(n)
	stacks := (float64(stackInUse()) - float64(stackBefore)) / float64(n)
	t.Logf("%d idle streams: %.1f KiB of relay memory each, of which %.1f KiB goroutine stacks (measured on a shared machine)", n, perStream/1024, stacks/1024)
	if raceEnabled {
		t.Skip("the race detector changes what memory holds; the bound is checked without it")
	}
	if perStream > 12<<10 {
		t.Fatalf("%.1f KiB per idle stream, more than 12 KiB", perStream/1024)
	}
}

// bareStream opens an event stream on a socket of its own, outside Go's
// network runtime, and reads until its `connected` event; it returns the
// socket, which holds the stream open.
func bareStream(port int, request, buf []byte) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	tv := syscall.Timeval{Sec: 10}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	if err := syscall.Connect(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	if _, err := syscall.Write(fd, request); err != nil {
		_ = syscall.Close(fd)
		return -1, err
	}
	var got []byte
	for !bytes.Contains(got, []byte("event: connected\n")) {
		m, err := syscall.Read(fd, buf)
		if err != nil || m <= 0 {
			_ = syscall.Close(fd)
			return -1, fmt.Errorf("reading the stream's start: %v (%q)", err, got)
		}
		got = append(got, buf[:m]...)
		if !bytes.HasPrefix(got, []byte("HTTP/1.1 200")) && len(got) >= 12 {
			_ = syscall.Close(fd)
			return -1, fmt.Errorf("answer %q", got)
		}
	}
	return fd, nil
}

// Streams opened after others ended still get their events.
func TestDetachedStreamsAfterOthersEnded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MetricsListen = "127.0.0.1:0" })
	for round := range 3 {
		s := openRawStream(t, tr.Addr(), "/actor/subscribe?actorUuid="+relaytest.AriaUUID, tr.AdminKey, 0)
		s.expect("connected")
		tr.setHP(relaytest.AriaUUID, 10+round)
		s.expect("actor-update")
		_ = s.conn.Close()
		if !pollUntil(3*time.Second, func() bool { return openSubscriptions(t, tr) == 0 }) {
			t.Fatalf("round %d: the stream's subscription is still open 3s after its client left", round)
		}
	}
}

// A detached stream's access line is written when the stream ends, not
// when it detaches: with its whole duration, every byte written and how it
// ended.
func TestDetachedStreamAccessLine(t *testing.T) {
	t.Parallel()
	var logs logSink
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := startTestRelayLogged(t, log)
	s := openRawStream(t, tr.Addr(), "/actor/subscribe?actorUuid="+relaytest.AriaUUID, tr.AdminKey, 0)
	s.expect("connected")
	tr.setHP(relaytest.AriaUUID, 17)
	update := s.expect("actor-update")
	time.Sleep(300 * time.Millisecond)
	streamLine := func() map[string]any {
		for _, l := range logs.lines(t) {
			if l["msg"] == "http" && l["path"] == "/actor/subscribe" {
				return l
			}
		}
		return nil
	}
	if l := streamLine(); l != nil {
		t.Fatalf("the stream's access line came while it was open: %v", l)
	}
	_ = s.conn.Close()
	var line map[string]any
	if !pollUntil(3*time.Second, func() bool { line = streamLine(); return line != nil }) {
		t.Fatal("no access line 3s after the stream's client left")
	}
	if line["status"] != float64(200) || line["code"] != "Canceled" || line["rpc"] != "/relay.v1.EventService/SubscribeActors" {
		t.Errorf("access line %v", line)
	}
	if d, _ := line["durationMs"].(float64); d < 300 {
		t.Errorf("the line's duration is %vms, the stream was open longer than 300ms", line["durationMs"])
	}
	if b, _ := line["bytes"].(float64); b < float64(len(update.data)) {
		t.Errorf("the line counts %v bytes, less than the update's event alone (%d)", line["bytes"], len(update.data))
	}
}
