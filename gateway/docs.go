package gateway

import (
	"embed"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/gen/openapi"
)

// docsFiles is the API reference page: an HTML page and the script and
// style sheet that render the OpenAPI document into it, written for the
// relay and served from the binary, so the page works on a relay without
// internet access.
//
//go:embed docs
var docsFiles embed.FS

// docsPolicy keeps the reference page to its own origin: its script and
// style sheet, and fetches of the OpenAPI document and of the calls its
// "Try it" forms send to this relay.
const docsPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// docsRoutes are the public documentation paths, for the gateway's route
// table: `/openapi.json`, `/docs` and the page's files under `/docs/`.
func docsRoutes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		http.MethodGet + " /openapi.json": serveOpenAPI,
		http.MethodGet + " /docs": func(w http.ResponseWriter, _ *http.Request) {
			serveDocsFile(w, "index.html")
		},
		http.MethodGet + " /docs/{file}": func(w http.ResponseWriter, r *http.Request) {
			file := strings.TrimPrefix(r.URL.Path, "/docs/")
			if file == "" || file == "index.html" {
				// The page loads its files relative to /docs.
				http.Redirect(w, r, "../docs", http.StatusMovedPermanently)
				return
			}
			serveDocsFile(w, file)
		},
	}
}

// serveDocsFile writes one file of the page, or 404.
func serveDocsFile(w http.ResponseWriter, name string) {
	data, err := docsFiles.ReadFile(path.Join("docs", path.Clean("/"+name)))
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, nil)
		return
	}
	h := w.Header()
	switch path.Ext(name) {
	case ".html":
		h.Set("Content-Type", "text/html; charset=utf-8")
	case ".js":
		h.Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		h.Set("Content-Type", "text/css; charset=utf-8")
	}
	h.Set("Content-Security-Policy", docsPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	_, _ = w.Write(data)
}

// serveOpenAPI serves the generated OpenAPI document.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openapi.JSON)))
	_, _ = w.Write(openapi.JSON)
}
