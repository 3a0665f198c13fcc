package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestStalledSSEReadersHoldUpOnlyThemselves checks the event streams that
// the hub's few writer goroutines write (SSE over HTTP/1.1): more streams
// than there are writers stop reading while megabytes of events come, and
// every stream that reads still gets every event, in order, while the
// stalled ones stay unread (a writer waiting on a full socket would stop
// them). Then the stalled streams read: each gets well-formed frames, the
// same events in the same order with no gap, up to either the end or an
// `overflow` event naming the last one it got, so the bytes the writers
// could not write at once went out whole, in order, after the rest.
func TestStalledSSEReadersHoldUpOnlyThemselves(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.WriteStallTimeout = time.Minute })
	q := relaytest.Q("hooks", "updateActor")
	var readers []*sseClient
	for range 3 {
		readers = append(readers, tr.openStream("/hooks/subscribe", tr.AdminKey, q, nil))
	}
	stalledCount := runtime.GOMAXPROCS(0) + 2
	type stalledStream struct {
		conn net.Conn
		br   *bufio.Reader
	}
	var stalled []stalledStream
	for range stalledCount {
		c, err := net.Dial("tcp", tr.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		// A small receive buffer, which the kernel does not grow (a tiny
		// one would make reading back slow, a window update at a time).
		c.(*net.TCPConn).SetReadBuffer(64 << 10)
		if _, err := io.WriteString(c, "GET /hooks/subscribe?hooks=updateActor HTTP/1.1\r\nHost: relay\r\nX-Api-Key: "+tr.AdminKey+"\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		stalled = append(stalled, stalledStream{conn: c, br: bufio.NewReaderSize(c, 1<<20)})
	}
	for _, r := range readers {
		r.expect("connected")
	}
	// Wait until the stalled streams are open: their first bytes arrive.
	for i, s := range stalled {
		s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.br.Peek(1); err != nil {
			t.Fatalf("stalled stream %d: %v", i, err)
		}
		s.conn.SetReadDeadline(time.Time{})
	}

	// Far more than the sockets between the relay and a stalled client
	// hold (a send buffer grows to 4 MiB at most on Linux by default):
	// 300 events of 32 KiB, within the queue of 1,024 events, so a stalled
	// stream may still get them all.
	const changes = 300
	began := time.Now()
	name := strings.Repeat("A name long enough to fill the sockets. ", 800)
	for i := range changes {
		tr.write("PUT", "/update", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": name + strconv.Itoa(i)}})
	}
	t.Logf("%d changes written after %v", changes, time.Since(began))
	// Every reading stream gets every event, in order, while the stalled
	// ones are not read at all.
	var want []string
	for i, r := range readers {
		var ids []string
		for len(ids) < changes {
			f := r.next(60 * time.Second)
			if f.event != "updateActor" {
				t.Fatalf("reader %d: event %q after %d", i, f.event, len(ids))
			}
			if !strings.Contains(f.data, name+strconv.Itoa(len(ids))+`"`) {
				t.Fatalf("reader %d: event %d (id %s) carries another change", i, len(ids), f.id)
			}
			ids = append(ids, f.id)
		}
		if i == 0 {
			want = ids
		} else if strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Fatalf("reader %d got ids %v, reader 0 %v", i, ids, want)
		}
	}

	t.Logf("the readers got every event after %v", time.Since(began))
	// Now the stalled streams read what was kept for them.
	for i, s := range stalled {
		resp, err := http.ReadResponse(s.br, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("stalled stream %d: %v %v", i, resp, err)
		}
		c := &sseClient{t: t, resp: resp, cancel: func() { s.conn.Close() }, frames: make(chan sseFrame, 10000)}
		go c.read()
		c.expect("connected")
		got := 0
		for got < changes {
			f := c.next(20 * time.Second)
			if f.event == "overflow" {
				last := "0"
				if got > 0 {
					last = want[got-1]
				}
				if lid, _ := f.json(t)["lastEventId"].(string); lid != last {
					t.Fatalf("stalled stream %d: overflow names %s after %d events, the last being %s", i, lid, got, last)
				}
				t.Logf("stalled stream %d: %d events, then overflow", i, got)
				break
			}
			if f.event != "updateActor" || f.id != want[got] || !strings.Contains(f.data, name+strconv.Itoa(got)+`"`) {
				t.Fatalf("stalled stream %d: event %d is %q id %s, want updateActor id %s", i, got, f.event, f.id, want[got])
			}
			got++
		}
		t.Logf("stalled stream %d: read %d after %v", i, got, time.Since(began))
		c.close()
	}
}
