package netlimit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// bodyResult is what a test handler saw of its request body.
type bodyResult struct {
	n   int
	err error
	// canceled reports whether the request's context ended while the
	// handler waited after the body.
	canceled bool
}

// guardedServer serves handler under g over HTTP/1.1 and h2c on a loopback
// port and returns its address.
func guardedServer(t *testing.T, g *BodyGuard, handler http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g.Wrap(handler), Protocols: new(http.Protocols)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// clients are the two ways to the server: HTTP/1.1 and h2c.
func clients() map[string]*http.Client {
	h2c := &http.Transport{Protocols: new(http.Protocols)}
	h2c.Protocols.SetUnencryptedHTTP2(true)
	return map[string]*http.Client{
		"HTTP/1.1": {Timeout: 30 * time.Second},
		"h2c":      {Timeout: 30 * time.Second, Transport: h2c},
	}
}

// readingHandler reads the whole body, waits for wait (the request's
// context must survive it), reports what it saw and answers.
func readingHandler(results chan<- bodyResult, wait time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		res := bodyResult{n: int(n), err: err}
		if err == nil {
			select {
			case <-r.Context().Done():
				res.canceled = true
			case <-time.After(wait):
			}
		}
		results <- res
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprintf(w, "%d", n)
	}
}

// pacedBody sends size bytes at about rate bytes per second, in pieces of
// piece bytes.
func pacedBody(size, rate, piece int) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		begin := time.Now()
		sent := 0
		for sent < size {
			n := min(piece, size-sent)
			if _, err := pw.Write(bytes.Repeat([]byte("x"), n)); err != nil {
				return
			}
			sent += n
			time.Sleep(time.Until(begin.Add(time.Duration(sent) * time.Second / time.Duration(rate))))
		}
		pw.Close()
	}()
	return pr
}

func post(t *testing.T, c *http.Client, url string, body io.ReadCloser, size int) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, body)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(size)
	return c.Do(req)
}

// TestBodyGuardTrickle: a body that trickles in below the minimum rate is
// cut off once its allowance is spent, over HTTP/1.1 and over h2c.
func TestBodyGuardTrickle(t *testing.T) {
	t.Parallel()
	for name, c := range clients() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := &BodyGuard{Timeout: 500 * time.Millisecond, MinRate: 1024}
			results := make(chan bodyResult, 1)
			url := guardedServer(t, g, readingHandler(results, 0))
			start := time.Now()
			// One byte every 100 ms: 10 bytes a second, far below 1 KiB/s.
			resp, err := post(t, c, url, pacedBody(1000, 10, 1), 1000)
			if err == nil {
				resp.Body.Close()
			}
			res := <-results
			took := time.Since(start)
			if !errors.Is(res.err, ErrSlowBody) || !errors.Is(res.err, os.ErrDeadlineExceeded) {
				t.Fatalf("read of a trickle: %d bytes, %v", res.n, res.err)
			}
			if took > 5*time.Second {
				t.Fatalf("the trickle was cut off only after %v", took)
			}
			if g.TimedOut() != 1 {
				t.Fatalf("TimedOut() = %d", g.TimedOut())
			}
			t.Logf("cut off after %v and %d bytes: %v", took, res.n, res.err)
		})
	}
}

// TestBodyGuardSteadyUpload: a body well above the minimum rate succeeds
// although it takes several times the allowance, and once it is in the
// request outlives the allowance (the deadline is gone).
func TestBodyGuardSteadyUpload(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	for name, c := range clients() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := &BodyGuard{Timeout: timeout, MinRate: 64 << 10}
			results := make(chan bodyResult, 1)
			url := guardedServer(t, g, readingHandler(results, 3*timeout))
			const size = 256 << 10
			start := time.Now()
			// 128 KiB/s, twice the minimum rate: two seconds.
			resp, err := post(t, c, url, pacedBody(size, 128<<10, 4<<10), size)
			if err != nil {
				t.Fatal(err)
			}
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			res := <-results
			if res.err != nil || res.n != size || res.canceled || resp.StatusCode != http.StatusOK || string(answer) != fmt.Sprint(size) {
				t.Fatalf("steady upload: %+v, answer %d %s", res, resp.StatusCode, answer)
			}
			if took := time.Since(start); took < 3*timeout {
				t.Fatalf("the upload took only %v: it did not outlast the allowance", took)
			}
			if g.TimedOut() != 0 {
				t.Fatalf("TimedOut() = %d", g.TimedOut())
			}
		})
	}
}

// TestBodyGuardUnreadBody: a body the handler never reads is bounded too:
// the answer comes, and the connection ends, within the allowance,
// however slowly the client sends.
func TestBodyGuardUnreadBody(t *testing.T) {
	t.Parallel()
	for name, c := range clients() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := &BodyGuard{Timeout: 500 * time.Millisecond, MinRate: 1024}
			url := guardedServer(t, g, func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "no key", http.StatusUnauthorized)
			})
			start := time.Now()
			resp, err := post(t, c, url, pacedBody(1000, 10, 1), 1000)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Fatalf("a trickle the handler does not read held its request for %v", took)
			}
			if err == nil && resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d", resp.StatusCode)
			}
		})
	}
}

// TestBodyGuardNoBody: requests without a body (event streams) have no
// read deadline, however long they last.
func TestBodyGuardNoBody(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	for name, c := range clients() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := &BodyGuard{Timeout: timeout, MinRate: 1024}
			results := make(chan bodyResult, 1)
			url := guardedServer(t, g, readingHandler(results, 4*timeout))
			resp, err := c.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if res := <-results; res.err != nil || res.canceled || resp.StatusCode != http.StatusOK {
				t.Fatalf("no body: %+v %d", res, resp.StatusCode)
			}
		})
	}
}

// TestBodyGuardOff: a zero allowance leaves the handler as it is.
func TestBodyGuardOff(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if got := (&BodyGuard{}).Wrap(h); fmt.Sprintf("%p", got) != fmt.Sprintf("%p", h) {
		t.Fatal("a guard without a time-out wraps the handler")
	}
}
