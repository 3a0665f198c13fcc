package gateway

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// Cross-origin requests (CORS). A web page served from another origin may
// call the API only when its origin is allowed (Options.CORSOrigins): the
// relay then answers the browser's preflight (an OPTIONS request with
// Access-Control-Request-Method, which carries no API key) before the
// admission step that would refuse it with 401, and marks every answer to
// an allowed origin, errors included, as readable by that page.
//
// The relay never uses cookies, so it never allows credentials: a page gets
// at the API only with an API key or a stream ticket it holds itself.
// Without allowed origins (the default) browsers keep other origins' pages
// out, and a preflight is refused with 403 naming the setting.

// corsAllowHeaders are the request headers a page may send: the API key,
// JSON and multipart bodies, an event stream's resume point, and a write's
// idempotency key.
const corsAllowHeaders = "X-Api-Key, Content-Type, Last-Event-ID, Idempotency-Key"

// corsExposeHeaders are the response headers a page may read besides the
// always readable ones: the request id, the wait after a 429 or 503, a
// download's file name, and the mark of a write answered again for its
// idempotency key.
const corsExposeHeaders = "X-Request-Id, Retry-After, Content-Disposition, Idempotent-Replay"

// corsMaxAge is how long, in seconds, a browser may reuse a preflight's
// answer.
const corsMaxAge = 600

// cors is the gateway's cross-origin policy.
type cors struct {
	// any allows every origin (`*`).
	any bool
	// origins are the allowed origins, normalised.
	origins []string
	// methods lists the HTTP methods of the API's routes, for preflights.
	methods string
}

// newCORS returns the policy for a list of origins checked by
// ParseCORSOrigins, with the methods of the route table.
func newCORS(origins []string, routes *routeTable) (*cors, error) {
	c := &cors{}
	for _, o := range origins {
		norm, err := normaliseOrigin(o)
		if err != nil {
			return nil, err
		}
		if norm == "*" {
			c.any = true
			continue
		}
		c.origins = append(c.origins, norm)
	}
	var methods []string
	for m := range routes.byMethod {
		methods = append(methods, m)
	}
	slices.Sort(methods)
	c.methods = strings.Join(methods, ", ")
	return c, nil
}

// ParseCORSOrigins reads a comma-separated list of allowed origins: `*`, or
// origins such as `https://app.example.org` or `http://localhost:5173`
// (scheme, host and port, nothing after). It returns them normalised (lower
// case, without a default port), or an error naming the bad entry.
func ParseCORSOrigins(list string) ([]string, error) {
	var out []string
	for _, o := range strings.Split(list, ",") {
		if o = strings.TrimSpace(o); o == "" {
			continue
		}
		norm, err := normaliseOrigin(o)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(out, norm) {
			out = append(out, norm)
		}
	}
	if slices.Contains(out, "*") && len(out) > 1 {
		return nil, fmt.Errorf("%q allows every origin: list no other origin with it", "*")
	}
	return out, nil
}

// normaliseOrigin checks one origin and writes it as a browser sends it in
// the Origin header.
func normaliseOrigin(o string) (string, error) {
	if o == "*" {
		return o, nil
	}
	if strings.EqualFold(o, "null") {
		return "", fmt.Errorf("origin %q is not allowed: it is what sandboxed frames and local files send, which any page can pose as", o)
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" ||
		u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("origin %q is not an origin: write scheme://host[:port], such as https://app.example.org, or * for every origin", o)
	}
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	scheme := strings.ToLower(u.Scheme)
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("origin %q has a bad port", o)
		}
		if !(scheme == "http" && port == "80") && !(scheme == "https" && port == "443") {
			host += ":" + port
		}
	}
	return scheme + "://" + host, nil
}

// allows reports whether a request's Origin header names an allowed origin.
func (c *cors) allows(origin string) bool {
	return c.any || slices.Contains(c.origins, origin)
}

// enabled reports whether any origin is allowed.
func (c *cors) enabled() bool { return c.any || len(c.origins) > 0 }

// handle marks the answer to a cross-origin request from an allowed origin
// as readable, and answers a preflight itself. It reports whether the
// request was answered. It runs before anything else the gateway does, so
// that every answer, refusals and errors included, carries the marks.
func (g *gateway) handleCORS(w http.ResponseWriter, r *http.Request) bool {
	c := g.cors
	origin := headerValue(r.Header, "Origin")
	preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
	h := w.Header()
	if c.enabled() && !c.any {
		// Caches must not give one origin's answer to another.
		h.Add("Vary", "Origin")
	}
	if origin == "" || !c.allows(origin) {
		if preflight {
			op := "error"
			if rt := g.routes.match(r.Header.Get("Access-Control-Request-Method"), r.URL.Path); rt != nil && rt.operation != "" {
				op = rt.operation
			}
			g.writeError(w, http.StatusForbidden, op, g.newRequestID(op),
				fmt.Sprintf("Origin %s may not call this relay from a browser: the relay's --cors-origins must list it", origin))
			return true
		}
		return false
	}
	if c.any {
		h.Set("Access-Control-Allow-Origin", "*")
	} else {
		h.Set("Access-Control-Allow-Origin", origin)
	}
	if !preflight {
		h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
		return false
	}
	h.Set("Access-Control-Allow-Methods", c.methods)
	h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
	h.Set("Access-Control-Max-Age", strconv.Itoa(corsMaxAge))
	w.WriteHeader(http.StatusNoContent)
	return true
}
