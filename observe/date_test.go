package observe

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestAccessStampsDate: answers that pass the access middleware carry the
// Date header net/http would give them (now, in http.TimeFormat), whether
// the handler writes a body, only a status, flushes or writes nothing, and
// a Date the handler set or suppressed is left as it is.
func TestAccessStampsDate(t *testing.T) {
	const fixed = "Mon, 02 Jan 2006 15:04:05 GMT"
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/body":
			_, _ = w.Write([]byte("hello"))
		case "/status":
			w.WriteHeader(http.StatusNoContent)
		case "/flush":
			w.(http.Flusher).Flush()
		case "/own":
			w.Header().Set("Date", fixed)
			_, _ = w.Write([]byte("hello"))
		case "/none":
			w.Header()["Date"] = nil
			_, _ = w.Write([]byte("hello"))
		}
	})
	srv := httptest.NewServer(Access(handler, AccessOptions{}))
	defer srv.Close()
	get := func(path string) http.Header {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.Header
	}
	for _, path := range []string{"/body", "/status", "/flush", "/nothing", "/body"} {
		before := time.Now().Truncate(time.Second)
		h := get(path)
		after := time.Now()
		if len(h.Values("Date")) != 1 {
			t.Fatalf("%s: Date headers %q, want one", path, h.Values("Date"))
		}
		d, err := time.Parse(http.TimeFormat, h.Get("Date"))
		if err != nil {
			t.Fatalf("%s: Date %q: %v", path, h.Get("Date"), err)
		}
		if d.Before(before) || d.After(after) {
			t.Fatalf("%s: Date %v, want between %v and %v", path, d, before, after)
		}
	}
	if got := get("/own").Values("Date"); len(got) != 1 || got[0] != fixed {
		t.Fatalf("a Date the handler set: got %q, want %q", got, fixed)
	}
	if got := get("/none").Values("Date"); len(got) != 0 {
		t.Fatalf("a Date the handler suppressed: got %q", got)
	}
}

// TestHTTPDateIsNetHTTPs: the shared Date value is time's own formatting
// in http.TimeFormat, in UTC, for the second asked, in any location.
func TestHTTPDateIsNetHTTPs(t *testing.T) {
	base := time.Date(2026, 11, 29, 23, 59, 58, 999999999, time.FixedZone("X", 5*3600))
	for i := range 5 {
		tm := base.Add(time.Duration(i) * 700 * time.Millisecond)
		if got, want := httpDate(tm)[0], tm.UTC().Format(http.TimeFormat); got != want {
			t.Fatalf("httpDate(%v) = %q, want %q", tm, got, want)
		}
	}
}
