package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// sendWith sends a request with the given headers and returns the answer;
// an event stream's answer is read up to its first frame only.
func (tr *testRelay) sendWith(method, path string, header http.Header, body string) relaytest.Response {
	tr.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, tr.Base+path, rd)
	if err != nil {
		tr.t.Fatal(err)
	}
	for k, v := range header {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	resp, err := tr.Client.Do(req)
	if err != nil {
		tr.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var data []byte
	if resp.Header.Get("Content-Type") == "text/event-stream" {
		buf := make([]byte, 4096)
		n, _ := resp.Body.Read(buf)
		data = buf[:n]
	} else if data, err = io.ReadAll(resp.Body); err != nil {
		tr.t.Fatal(err)
	}
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// TestCORS: with allowed origins, a page of one of them gets its preflights
// answered without a key, on every kind of route, and can read every
// answer, refusals included; other origins get nothing to read, and their
// preflights a 403 naming the setting.
func TestCORS(t *testing.T) {
	t.Parallel()
	const (
		app   = "https://app.example.org"
		local = "http://localhost:5173"
		other = "https://evil.example.net"
	)
	tr := startTestRelay(t, func(c *node.Config) {
		c.CORSOrigins = "https://APP.example.org:443, " + local
		c.AuthFailureLimit = 3
		c.MaxQueryBytes = 1024
	})
	ticket := tr.Do("POST", "/stream-tickets", tr.AdminKey, nil, map[string]any{}).Data(t)["ticket"].(string)

	// Preflights carry no key: they are answered before admission, and
	// however many there are, they are not failed authentications.
	doors := []struct{ method, path, headers string }{
		{"PUT", "/update", "x-api-key, content-type"},
		{"GET", "/get?uuid=" + relaytest.AriaUUID, "x-api-key"},
		{"DELETE", "/keys/abc", "x-api-key"},
		{"POST", "/dnd5e/skill-check", "x-api-key, content-type"},
		{"POST", "/upload", "x-api-key"},
		{"GET", "/download?path=a", "x-api-key"},
		{"POST", "/stream-tickets", "x-api-key"},
		{"GET", "/hooks/subscribe", "x-api-key, last-event-id"},
		{"GET", "/healthz", ""},
		{"GET", "/openapi.json", ""},
		{"GET", "/no/such/route", "x-api-key"},
	}
	for _, origin := range []string{app, local} {
		for _, d := range doors {
			h := http.Header{"Origin": {origin}, "Access-Control-Request-Method": {d.method}}
			if d.headers != "" {
				h.Set("Access-Control-Request-Headers", d.headers)
			}
			r := tr.sendWith("OPTIONS", d.path, h, "")
			if r.Status != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != origin ||
				r.Header.Get("Access-Control-Allow-Methods") != "DELETE, GET, PATCH, POST, PUT" ||
				r.Header.Get("Access-Control-Allow-Headers") != "X-Api-Key, Content-Type, Last-Event-ID, Idempotency-Key" ||
				r.Header.Get("Access-Control-Max-Age") != "600" || r.Header.Get("Access-Control-Allow-Credentials") != "" ||
				!strings.Contains(strings.Join(r.Header.Values("Vary"), ","), "Origin") {
				t.Fatalf("preflight of %s %s from %s: %d %v %s", d.method, d.path, origin, r.Status, r.Header, r.Body)
			}
		}
	}
	h := http.Header{"Origin": {other}, "Access-Control-Request-Method": {"PUT"}, "Access-Control-Request-Headers": {"x-api-key"}}
	if r := tr.sendWith("OPTIONS", "/update", h, ""); r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" ||
		r.ErrorText(t) != "Origin https://evil.example.net may not call this relay from a browser: the relay's --cors-origins must list it" {
		t.Fatalf("preflight from another origin: %d %v %s", r.Status, r.Header, r.Body)
	}

	// Every answer to an allowed origin is readable, with the headers a
	// page needs; nothing is, to another origin.
	readable := func(what string, r relaytest.Response, status int) {
		t.Helper()
		if r.Status != status || r.Header.Get("Access-Control-Allow-Origin") != app ||
			r.Header.Get("Access-Control-Expose-Headers") != "X-Request-Id, Retry-After, Content-Disposition, Idempotent-Replay" {
			t.Fatalf("%s: %d %v %s", what, r.Status, r.Header, r.Body)
		}
	}
	withKey := http.Header{"Origin": {app}, "X-Api-Key": {tr.AdminKey}}
	readable("a read", tr.sendWith("GET", "/get?uuid="+relaytest.AriaUUID, withKey, ""), http.StatusOK)
	readable("an update", tr.sendWith("PUT", "/update", withKey, `{"uuid":"`+relaytest.AriaUUID+`","data":{"name":"Aria"}}`), http.StatusOK)
	readable("a bad parameter", tr.sendWith("GET", "/get", withKey, ""), http.StatusBadRequest)
	readable("an unknown route", tr.sendWith("GET", "/no/such/route", withKey, ""), http.StatusNotFound)
	readable("a long query", tr.sendWith("GET", "/get?uuid="+strings.Repeat("a", 2000), withKey, ""), http.StatusRequestURITooLong)
	readable("the health check", tr.sendWith("GET", "/healthz", http.Header{"Origin": {app}}, ""), http.StatusOK)
	readable("an event stream with a key", tr.sendWith("GET", "/hooks/subscribe", withKey, ""), http.StatusOK)
	readable("an event stream with a ticket", tr.sendWith("GET", "/hooks/subscribe?ticket="+url.QueryEscape(ticket), http.Header{"Origin": {app}}, ""), http.StatusOK)
	readable("a download", tr.sendWith("GET", "/download?path=nothing.txt", withKey, ""), http.StatusNotFound)
	noKey := http.Header{"Origin": {app}}
	for range 3 {
		readable("a call without a key", tr.sendWith("GET", "/get?uuid="+relaytest.AriaUUID, noKey, ""), http.StatusUnauthorized)
	}
	r := tr.sendWith("GET", "/get?uuid="+relaytest.AriaUUID, noKey, "")
	readable("a refusal after too many failures", r, http.StatusTooManyRequests)
	if r.Header.Get("Retry-After") == "" || r.Header.Get("X-Request-Id") == "" {
		t.Fatalf("the 429 lacks Retry-After or X-Request-Id: %v", r.Header)
	}
	for _, path := range []string{"/get?uuid=" + relaytest.AriaUUID, "/hooks/subscribe", "/healthz"} {
		if r := tr.sendWith("GET", path, http.Header{"Origin": {other}, "X-Api-Key": {tr.AdminKey}}, ""); r.Header.Get("Access-Control-Allow-Origin") != "" || r.Header.Get("Access-Control-Expose-Headers") != "" {
			t.Fatalf("GET %s from another origin is readable: %v", path, r.Header)
		}
	}
}

// TestCORSDefaultsAndStar: without the setting no other origin may read
// anything (event streams included: they no longer allow every origin on
// their own), and `*` allows every origin without naming it.
func TestCORSDefaultsAndStar(t *testing.T) {
	t.Parallel()
	const app = "https://app.example.org"
	none := startTestRelay(t)
	h := http.Header{"Origin": {app}, "Access-Control-Request-Method": {"GET"}, "Access-Control-Request-Headers": {"x-api-key"}}
	if r := none.sendWith("OPTIONS", "/hooks/subscribe", h, ""); r.Status != http.StatusForbidden || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a preflight without allowed origins: %d %v %s", r.Status, r.Header, r.Body)
	}
	for _, path := range []string{"/get?uuid=" + relaytest.AriaUUID, "/hooks/subscribe"} {
		r := none.sendWith("GET", path, http.Header{"Origin": {app}, "X-Api-Key": {none.AdminKey}}, "")
		if r.Status != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "" || len(r.Header.Values("Vary")) != 0 {
			t.Fatalf("GET %s from another origin without allowed origins: %d %v", path, r.Status, r.Header)
		}
	}

	star := startTestRelay(t, func(c *node.Config) { c.CORSOrigins = "*" })
	if r := star.sendWith("OPTIONS", "/hooks/subscribe", h, ""); r.Status != http.StatusNoContent || r.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("a preflight with every origin allowed: %d %v %s", r.Status, r.Header, r.Body)
	}
	r := star.sendWith("GET", "/hooks/subscribe", http.Header{"Origin": {app}, "X-Api-Key": {star.AdminKey}}, "")
	if r.Status != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "*" || len(r.Header.Values("Vary")) != 0 {
		t.Fatalf("a stream with every origin allowed: %d %v", r.Status, r.Header)
	}
	// Without an Origin header (curl, servers) nothing changes.
	if r := star.sendWith("GET", "/get?uuid="+relaytest.AriaUUID, http.Header{"X-Api-Key": {star.AdminKey}}, ""); r.Status != http.StatusOK || r.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("a call without Origin: %d %v", r.Status, r.Header)
	}
	// An OPTIONS request that is no preflight goes where it went before.
	if r := star.sendWith("OPTIONS", "/get", http.Header{"X-Api-Key": {star.AdminKey}}, ""); r.Status == http.StatusNoContent {
		t.Fatalf("a plain OPTIONS request was answered as a preflight: %v", r.Header)
	}
}

// TestServeFlagsOfTheBrowser: `relay serve --help` documents the browser
// settings, and a bad origin is refused naming the flag before anything
// starts.
func TestServeFlagsOfTheBrowser(t *testing.T) {
	var help bytes.Buffer
	if err := serveCommand(context.Background(), []string{"--help"}, io.Discard, &help); err == nil {
		t.Fatal("--help did not stop the command")
	}
	for _, want := range []string{"-cors-origins origins", "(RELAY_CORS_ORIGINS)", "-console", "(RELAY_CONSOLE) (default true)"} {
		if !strings.Contains(help.String(), want) {
			t.Errorf("relay serve --help lacks %q", want)
		}
	}
	for _, tc := range []struct {
		args      []string
		env, want string
	}{
		{[]string{"--cors-origins", "https://app.example.org/path"}, "", `--cors-origins: origin "https://app.example.org/path" is not an origin: write scheme://host[:port], such as https://app.example.org, or * for every origin`},
		{nil, "RELAY_CORS_ORIGINS=null", `--cors-origins: origin "null" is not allowed: it is what sandboxed frames and local files send, which any page can pose as`},
	} {
		if tc.env != "" {
			name, value, _ := strings.Cut(tc.env, "=")
			t.Setenv(name, value)
		}
		args := append([]string{"--data", t.TempDir()}, tc.args...)
		err := serveCommand(context.Background(), args, io.Discard, io.Discard)
		var uerr usageError
		if !errors.As(err, &uerr) || err.Error() != tc.want {
			t.Errorf("serve %v %s: %v, want %q", tc.args, tc.env, err, tc.want)
		}
	}
}
