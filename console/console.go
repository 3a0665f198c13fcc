// Package console serves the relay's web console at /console: a page of
// plain HTML, CSS and JavaScript, embedded in the binary, that calls the
// relay's own REST API with an API key its user signs in with. It lists
// the worlds the key may use, creates pairing codes for tabletops, creates
// and revokes keys within the key's rights, and shows a world's events
// live through a stream ticket and an EventSource.
//
// The console holds no power of its own: it is static files, and every
// action is an API call that the relay authenticates and authorises like
// any other. It is served from the relay's own origin, so it needs no
// cross-origin permission (see gateway's CORS), and with a strict content
// security policy: only its own script runs, it talks only to the relay,
// and no other site may frame it.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Path is where the console is served.
const Path = "/console"

// asset is one embedded file, ready to serve.
type asset struct {
	contentType string
	body        []byte
	etag        string
}

// assets are the console's files by URL path.
var assets = func() map[string]asset {
	load := func(name, contentType string) asset {
		body, err := static.ReadFile("static/" + name)
		if err != nil {
			panic("console: " + err.Error())
		}
		sum := sha256.Sum256(body)
		return asset{contentType: contentType, body: body, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
	}
	index := load("index.html", "text/html; charset=utf-8")
	return map[string]asset{
		Path:                  index,
		Path + "/":            index,
		Path + "/console.js":  load("console.js", "text/javascript; charset=utf-8"),
		Path + "/console.css": load("console.css", "text/css; charset=utf-8"),
	}
}()

// securityPolicy lets the console run only its own script and style, call
// only the relay it came from, and be framed by no one.
const securityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Owns reports whether a request path is the console's.
func Owns(path string) bool {
	return path == Path || strings.HasPrefix(path, Path+"/")
}

// Handler serves the console's paths and hands every other request to next.
func Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !Owns(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		serve(w, r)
	})
}

// serve answers a request for one of the console's files.
func serve(w http.ResponseWriter, r *http.Request) {
	a, ok := assets[r.URL.Path]
	if !ok {
		http.Error(w, "Not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "Method not allowed: "+r.Method+" "+r.URL.Path, http.StatusMethodNotAllowed)
		return
	}
	h := w.Header()
	h.Set("Content-Type", a.contentType)
	h.Set("Content-Security-Policy", securityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	// Revalidated every time, so a new relay's console is never mixed
	// with an old one's cached files; the ETag keeps that cheap.
	h.Set("Cache-Control", "no-cache")
	h.Set("ETag", a.etag)
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
}
