//go:build !race

// The race detector drops sync.Pool's items at random, which changes the
// allocation counts these tests hold the relay to.

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// maxGetAllocs is the most heap allocations the relay may make, on
// average, for one `GET /get` of a 33 KB actor over a keep-alive HTTP/1.1
// connection, access line (JSON, level Info) included. Allocations are a
// good share of a small read's CPU (the allocation itself, and the
// collections it brings), and unlike a timing their count holds on a
// busy machine.
const maxGetAllocs = 92

// TestRESTGetAllocations counts the allocations of the whole process per
// `GET /get`, served over a real connection from a client that allocates
// nothing per request of its own, alone and as the node of a cluster of
// one.
func TestRESTGetAllocations(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"alone", false}, {"cluster of one", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// The logger `relay serve` writes JSON with, as a relay runs.
			log, logBuf, err := newLogger("json", "info", io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = logBuf.Close() })
			r := relaytest.StartLogged(t, log, func(c *node.Config) {
				if tc.cluster {
					c.Cluster.NodeName = "alloc"
					c.Cluster.ClusterListen = freeLoopbackAddr(t)
				}
			})
			conn, err := net.Dial("tcp", strings.TrimPrefix(r.Base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(time.Minute))
			request := []byte(fmt.Sprintf("GET /get?uuid=%s&userId=Alice HTTP/1.1\r\nHost: relay\r\nX-Api-Key: %s\r\n\r\n", relaytest.AriaUUID, r.AdminKey))
			rd := bufio.NewReaderSize(conn, 64<<10)
			body := make([]byte, 0, 64<<10)
			get := func() {
				if _, err := conn.Write(request); err != nil {
					t.Fatal(err)
				}
				n, err := readAnswer(rd, body)
				if err != nil {
					t.Fatal(err)
				}
				if n < 30000 {
					t.Fatalf("answer of %d bytes", n)
				}
			}
			for range 300 {
				get()
			}
			const calls = 2000
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for range calls {
				get()
			}
			runtime.ReadMemStats(&after)
			perCall := float64(after.Mallocs-before.Mallocs) / calls
			t.Logf("%.1f allocations, %.0f bytes per GET /get", perCall, float64(after.TotalAlloc-before.TotalAlloc)/calls)
			if perCall > maxGetAllocs {
				t.Errorf("%.1f allocations per GET /get, want at most %d", perCall, maxGetAllocs)
			}
		})
	}
}

var contentLength = []byte("Content-Length")

// readAnswer reads one HTTP/1.1 answer with a Content-Length into buf's
// room, without allocating, and returns its body's length; a status other
// than 200 is an error.
func readAnswer(rd *bufio.Reader, buf []byte) (int, error) {
	length := -1
	for first := true; ; first = false {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
				return 0, fmt.Errorf("status line %q", line)
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, contentLength) {
			length = 0
			for _, c := range bytes.TrimSpace(value) {
				if c < '0' || c > '9' {
					return 0, fmt.Errorf("content length %q", value)
				}
				length = length*10 + int(c-'0')
			}
		}
	}
	if length < 0 || length > cap(buf) {
		return 0, fmt.Errorf("content length %d", length)
	}
	_, err := io.ReadFull(rd, buf[:length])
	return length, err
}

// freeLoopbackAddr is a free port of 127.0.0.1.
func freeLoopbackAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
