package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/gen/openapi"
)

// TestDocsPage checks the API reference page's HTTP side: /docs and its
// files need no key, load nothing from elsewhere, and the page points at
// the relay's own OpenAPI document.
func TestDocsPage(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	page := tr.Do(http.MethodGet, "/docs", "", nil, nil)
	if page.Status != http.StatusOK || !strings.HasPrefix(page.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("/docs: %d %s", page.Status, page.Header.Get("Content-Type"))
	}
	html := string(page.Body)
	for _, want := range []string{`data-spec="openapi.json"`, `<script src="docs/docs.js"`, `href="docs/docs.css"`} {
		if !strings.Contains(html, want) {
			t.Errorf("/docs lacks %s", want)
		}
	}
	// Nothing is loaded from another origin.
	if m := regexp.MustCompile(`(?i)(src|href)="(https?:)?//`).FindString(html); m != "" {
		t.Errorf("/docs loads from elsewhere: %s", m)
	}
	for _, f := range []struct{ path, contentType string }{
		{"/docs", "text/html"},
		{"/docs/docs.js", "text/javascript"},
		{"/docs/docs.css", "text/css"},
	} {
		r := tr.Do(http.MethodGet, f.path, "", nil, nil)
		if r.Status != http.StatusOK || !strings.HasPrefix(r.Header.Get("Content-Type"), f.contentType) {
			t.Errorf("%s: %d %q", f.path, r.Status, r.Header.Get("Content-Type"))
		}
		if csp := r.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", f.path, csp)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", f.path)
		}
	}
	if r := tr.Do(http.MethodGet, "/docs/missing.js", "", nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("/docs/missing.js: %d", r.Status)
	}
	if r := tr.Do(http.MethodGet, "/docs/..%2Fgateway.go", "", nil, nil); r.Status != http.StatusNotFound {
		t.Errorf("/docs/..%%2Fgateway.go: %d", r.Status)
	}
	if r := tr.Do(http.MethodGet, "/openapi.json", "", nil, nil); r.Status != http.StatusOK || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("/openapi.json: %d %q", r.Status, r.Header.Get("Content-Type"))
	}
}

// TestDocsPageRenders opens /docs in headless Chromium and checks that the
// page rendered every operation of the OpenAPI document from the relay
// itself.
func TestDocsPageRenders(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is missing: .ci/run installs Debian's chromium package", chromium)
		}
		t.Skipf("skipped: %s is missing (Debian's chromium package; .ci/run installs it)", chromium)
	}
	t.Parallel()
	tr := startTestRelay(t)
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(openapi.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	operations := 0
	for _, item := range doc.Paths {
		for method := range item {
			switch method {
			case "get", "put", "post", "delete", "patch":
				operations++
			}
		}
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--no-first-run",
		"--user-data-dir="+filepath.Join(dir, "profile"), "--virtual-time-budget=10000", "--dump-dom", tr.Base+"/docs")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
	dom := string(out)
	if strings.Contains(dom, `id="load-error"`) {
		t.Fatalf("the page could not load the document:\n%s", dom)
	}
	if want := `data-operations="` + strconv.Itoa(operations) + `"`; !strings.Contains(dom, want) {
		t.Fatalf("the page did not render the %d operations (%s):\n%.2000s", operations, want, dom)
	}
	// A few landmarks of the rendered reference.
	for _, want := range []string{`id="DocumentService_GetDocument"`, `id="EventService_SubscribeActors"`, "Reads one document by uuid", `class="method get"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the rendered page lacks %s", want)
		}
	}
}
