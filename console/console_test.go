package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesTheConsoleAndPassesTheRest(t *testing.T) {
	t.Parallel()
	h := Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}))
	get := func(method, path string, header http.Header) *httptest.ResponseRecorder {
		r := httptest.NewRequest(method, path, nil)
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, tc := range []struct{ path, contentType, contains string }{
		{"/console", "text/html; charset=utf-8", `<script src="/console/console.js" defer></script>`},
		{"/console/", "text/html; charset=utf-8", `id="signin-form"`},
		{"/console/console.js", "text/javascript; charset=utf-8", `sessionStorage`},
		{"/console/console.css", "text/css; charset=utf-8", `.card`},
	} {
		w := get("GET", tc.path, nil)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != tc.contentType || !strings.Contains(w.Body.String(), tc.contains) {
			t.Fatalf("GET %s: %d %v", tc.path, w.Code, w.Header())
		}
		for name, want := range map[string]string{
			"Content-Security-Policy": securityPolicy,
			"X-Content-Type-Options":  "nosniff",
			"X-Frame-Options":         "DENY",
			"Referrer-Policy":         "no-referrer",
			"Cache-Control":           "no-cache",
		} {
			if got := w.Header().Get(name); got != want {
				t.Fatalf("GET %s: %s is %q", tc.path, name, got)
			}
		}
		// A browser revalidating its copy gets 304.
		if again := get("GET", tc.path, http.Header{"If-None-Match": {w.Header().Get("ETag")}}); again.Code != http.StatusNotModified {
			t.Fatalf("GET %s with its ETag: %d", tc.path, again.Code)
		}
	}
	// The console never stores the key anywhere that outlives the tab.
	js := get("GET", "/console/console.js", nil).Body.String()
	for _, banned := range []string{"localStorage", "document.cookie", "innerHTML"} {
		if strings.Contains(js, banned) {
			t.Fatalf("console.js uses %s", banned)
		}
	}
	if w := get("GET", "/console/nothing.js", nil); w.Code != http.StatusNotFound {
		t.Fatalf("an unknown console file: %d", w.Code)
	}
	if w := get("POST", "/console", nil); w.Code != http.StatusMethodNotAllowed || w.Header().Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST /console: %d %v", w.Code, w.Header())
	}
	for _, path := range []string{"/", "/consoles", "/get", "/hooks/subscribe"} {
		if w := get("GET", path, nil); w.Code != http.StatusTeapot {
			t.Fatalf("GET %s did not reach the API: %d", path, w.Code)
		}
	}
}
