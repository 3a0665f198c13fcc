package relaytest

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// SSEEvent is one event of a server-sent event stream.
type SSEEvent struct {
	ID   uint64
	Name string
	Data string
}

// ReadSSE sends req, an event stream's request, fails the test unless it
// is answered 200, and delivers the stream's events until it ends (its
// request's context ending ends it).
func ReadSSE(t testing.TB, req *http.Request) <-chan SSEEvent {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream %s on %s: status %d", req.URL.Path, req.URL.Host, resp.StatusCode)
	}
	out := make(chan SSEEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		var ev SSEEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.Name != "" {
					out <- ev
				}
				ev = SSEEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.ID, _ = strconv.ParseUint(strings.TrimPrefix(line, "id: "), 10, 64)
			case strings.HasPrefix(line, "event: "):
				ev.Name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.Data += strings.TrimPrefix(line, "data: ")
			}
		}
	}()
	return out
}
