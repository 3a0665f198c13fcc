//go:build !race

// The driver shares readAnswer with the allocation tests, which run only
// without the race detector; counting instructions makes sense only
// without it too.

package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestInstructionDriver drives a fixed number of requests through one
// keep-alive HTTP/1.1 connection, for counting the instructions they cost
// under valgrind's callgrind, whose counts for the same binary and inputs
// stay within about 2 % however busy the machine is. It runs only when
// RELAY_INSTR_OP names the operation: `get` (`GET /get` of the 33 KB
// wizard as Alice, through the relay), `bare` (the same bytes from a bare
// net/http handler, as relay-bench's baseline serves them) or `update`
// (`PUT /update` of Brom's hit points, a changed value each time).
// RELAY_INSTR_N is the number of requests after a warm-up of 200.
// scripts/instructions.sh runs it and has callgrind count the measured
// requests alone (see RELAY_INSTR_WINDOW below):
//
//	go test -c -o /tmp/relay.test ./cmd/relay
//	scripts/instructions.sh /tmp/relay.test get 3000
func TestInstructionDriver(t *testing.T) {
	op := os.Getenv("RELAY_INSTR_OP")
	if op == "" {
		t.Skip("RELAY_INSTR_OP is not set")
	}
	n, err := strconv.Atoi(os.Getenv("RELAY_INSTR_N"))
	if err != nil || n < 0 {
		t.Fatalf("RELAY_INSTR_N %q is not a count", os.Getenv("RELAY_INSTR_N"))
	}
	log, logBuf, err := newLogger("json", "info", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logBuf.Close() })
	r := relaytest.StartLogged(t, log)
	addr := strings.TrimPrefix(r.Base, "http://")
	get := fmt.Sprintf("GET /get?uuid=%s&userId=Alice HTTP/1.1\r\nHost: relay\r\nX-Api-Key: %s\r\n\r\n", relaytest.AriaUUID, r.AdminKey)
	request := func(i int) []byte { return []byte(get) }
	switch op {
	case "get":
	case "bare":
		addr = startBareHandler(t, fetchOnce(t, addr, get))
	case "update":
		request = func(i int) []byte {
			body := fmt.Sprintf(`{"data":{"system.attributes.hp.value":%d}}`, 1+i%40)
			return fmt.Appendf(nil, "PUT /update?uuid=%s HTTP/1.1\r\nHost: relay\r\nX-Api-Key: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
				relaytest.BromUUID, r.AdminKey, len(body), body)
		}
	default:
		t.Fatalf("RELAY_INSTR_OP %q is not get, bare or update", op)
	}
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rd := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 0, 64<<10)
	// RELAY_INSTR_WINDOW names a directory through which a script outside
	// the process has callgrind zero its counts after the warm-up and dump
	// them after the last request (callgrind_control -z, then -d), so that
	// the dump holds the measured requests alone. The driver announces
	// each point with a file (start, stop) and waits for the script's
	// answer (started, stopped): a process under callgrind cannot run the
	// command itself.
	window := os.Getenv("RELAY_INSTR_WINDOW")
	handshake := func(announce, answer string) {
		if err := os.WriteFile(filepath.Join(window, announce), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(window, answer)); err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %s in %s", answer, window)
			}
		}
	}
	for i := range 200 + n {
		if window != "" && i == 200 {
			handshake("start", "started")
		}
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		if _, err := conn.Write(request(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := readAnswer(rd, buf); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if window != "" {
		handshake("stop", "stopped")
	}
}

// fetchOnce sends one raw request and returns the answer's body.
func fetchOnce(t *testing.T, addr, request string) []byte {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 64<<10)
	if _, err := conn.Write([]byte(request)); err != nil {
		t.Fatal(err)
	}
	n, err := readAnswer(bufio.NewReader(conn), buf)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n]
}

// startBareHandler serves body from a bare net/http handler on a free
// port of 127.0.0.1, as relay-bench's baseline does, and returns its
// address.
func startBareHandler(t *testing.T, body []byte) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	length := strconv.Itoa(len(body))
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", length)
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}
