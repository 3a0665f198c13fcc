//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestAnswerLeavesInOneWrite counts the write system calls of the whole
// process (Linux's /proc/self/io) while a client sends REST requests over
// one keep-alive HTTP/1.1 connection with one write each: every answer,
// headers and body, must leave the relay in one more. A 33 KB document
// outgrows net/http's connection buffer, which on its own sends it in two
// writes; a chunked answer would take three or more. Writing a large
// answer is a good share of a read's CPU, and each extra write wakes the
// client once more. Not parallel: the count is the process's.
func TestAnswerLeavesInOneWrite(t *testing.T) {
	if _, err := writeSyscalls(); err != nil {
		t.Skipf("no write count to read: %v", err)
	}
	log, logBuf, err := newLogger("json", "info", io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logBuf.Close() })
	r := relaytest.StartLogged(t, log)
	conn, err := net.Dial("tcp", strings.TrimPrefix(r.Base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	rd := bufio.NewReaderSize(conn, 64<<10)
	for _, tc := range []struct {
		name, target string
		status       int
		minBytes     int
	}{
		{"GET /get of a 33 KB actor", "/get?uuid=" + relaytest.AriaUUID + "&userId=Alice", 200, 30000},
		{"GET /get of an 18 KB actor", "/get?uuid=" + relaytest.BromUUID, 200, 15000},
		{"GET /get of a missing document", "/get?uuid=Actor.noSuchActor00001", 404, 10},
		{"an unknown route", "/no-such-route", 404, 10},
	} {
		request := []byte(fmt.Sprintf("GET %s HTTP/1.1\r\nHost: relay\r\nX-Api-Key: %s\r\n\r\n", tc.target, r.AdminKey))
		get := func() {
			if _, err := conn.Write(request); err != nil {
				t.Fatal(err)
			}
			status, n, err := readAnyAnswer(rd)
			if err != nil {
				t.Fatal(err)
			}
			if status != tc.status || n < tc.minBytes {
				t.Fatalf("%s: status %d with %d bytes, want %d with at least %d", tc.name, status, n, tc.status, tc.minBytes)
			}
		}
		for range 20 {
			get()
		}
		const calls = 200
		before, _ := writeSyscalls()
		for range calls {
			get()
		}
		after, _ := writeSyscalls()
		// One write for the request, one for its answer; some room
		// for what else the process writes meanwhile.
		perCall := float64(after-before) / calls
		t.Logf("%s: %.2f write system calls per request and answer", tc.name, perCall)
		if perCall > 2.3 {
			t.Errorf("%s: %.2f write system calls per request and answer, want 2 (the request's and the answer's)", tc.name, perCall)
		}
	}
}

// writeSyscalls is the process's count of write system calls so far.
func writeSyscalls() (int64, error) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("no syscw in /proc/self/io")
}

// readAnyAnswer reads one HTTP/1.1 answer with a Content-Length and
// returns its status and its body's length.
func readAnyAnswer(rd *bufio.Reader) (status, length int, err error) {
	length = -1
	for first := true; ; first = false {
		line, err := rd.ReadSlice('\n')
		if err != nil {
			return 0, 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if first {
			fields := strings.Fields(string(line))
			if len(fields) < 2 {
				return 0, 0, fmt.Errorf("status line %q", line)
			}
			if status, err = strconv.Atoi(fields[1]); err != nil {
				return 0, 0, fmt.Errorf("status line %q", line)
			}
			continue
		}
		if len(line) == 0 {
			break
		}
		if name, value, ok := bytes.Cut(line, []byte(":")); ok && bytes.EqualFold(name, []byte("Content-Length")) {
			if length, err = strconv.Atoi(string(bytes.TrimSpace(value))); err != nil {
				return 0, 0, fmt.Errorf("content length %q", value)
			}
		}
	}
	if length < 0 {
		return 0, 0, fmt.Errorf("an answer without a Content-Length")
	}
	_, err = io.CopyN(io.Discard, rd, int64(length))
	return status, length, err
}
