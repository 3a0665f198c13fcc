package gateway

import (
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// contractRoutes is the route table of the contract alone.
func contractRoutes() *routeTable {
	t, err := loadRoutes(nil)
	if err != nil {
		panic(err)
	}
	return t
}

// samplePath is a request path a pattern matches: its variables filled in.
func samplePath(rt *route) string {
	segs := slices.Clone(rt.segments)
	for i, s := range segs {
		if isVariable(s) {
			segs[i] = "k_1"
		}
	}
	return "/" + strings.Join(segs, "/")
}

// allRoutes lists a table's routes, sorted.
func allRoutes(t *routeTable) []*route {
	var out []*route
	for _, list := range t.byMethod {
		out = append(out, list...)
	}
	slices.SortFunc(out, func(a, b *route) int { return strings.Compare(a.httpMethod+a.path, b.httpMethod+b.path) })
	return out
}

// TestRoutesIndependentOfOrder builds the route table of the contract
// with its routes added in many orders, and checks that each route's path
// and method find that route in every one of them, and that near misses (a
// trailing slash, a missing leading one, one segment more) find nothing.
func TestRoutesIndependentOfOrder(t *testing.T) {
	t.Parallel()
	routes := allRoutes(contractRoutes())
	if len(routes) < 50 {
		t.Fatalf("only %d routes in the contract", len(routes))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		order := slices.Clone(routes)
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		table := &routeTable{byMethod: map[string][]*route{}, byRPC: map[string]*route{}}
		for _, rt := range order {
			if err := table.add(rt); err != nil {
				t.Fatal(err)
			}
		}
		for _, rt := range routes {
			path := samplePath(rt)
			if got := table.match(rt.httpMethod, path); got != rt {
				t.Fatalf("order %d: %s %s finds %v, want %s", round, rt.httpMethod, path, got, rt.name())
			}
			// A near miss finds nothing; only one segment more may find
			// another route whose pattern it fits (`/accounts/x` is
			// `/accounts/{id}`), never rt.
			for _, miss := range []string{path + "/", path[1:], path + "/x"} {
				if got := table.match(rt.httpMethod, miss); got != nil && (got == rt || !strings.HasSuffix(miss, "/x")) {
					t.Fatalf("order %d: %s %q finds %s", round, rt.httpMethod, miss, got.name())
				}
			}
		}
	}
	// Path variables are read from the path.
	table := contractRoutes()
	rt := table.match(http.MethodDelete, "/keys/k_123")
	if rt == nil || rt.pathVariables("/keys/k_123")["id"] != "k_123" {
		t.Fatalf("DELETE /keys/k_123: %v", rt)
	}
	if !table.otherMethod(http.MethodPost, "/get") || table.otherMethod(http.MethodGet, "/nowhere") {
		t.Fatal("otherMethod")
	}
}

// TestOverlappingRoutesRefused: a route that could match what another
// route of its method matches is refused, naming both.
func TestOverlappingRoutesRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		a, b    string
		overlap bool
	}{
		{"/keys/{id}", "/keys/mine", true},
		{"/keys/{id}", "/keys/{name}", true},
		{"/get", "/get", true},
		{"/keys/{id}", "/keys", false},
		{"/keys/{id}", "/clients/{id}", false},
		{"/a/{x}/c", "/a/b/{y}", true},
		{"/a/{x}/c", "/a/b/d", false},
	} {
		table := &routeTable{byMethod: map[string][]*route{}, byRPC: map[string]*route{}}
		if err := table.add(&route{httpMethod: http.MethodGet, path: tc.a, segments: splitPath(tc.a), fullMethod: "/A"}); err != nil {
			t.Fatal(err)
		}
		err := table.add(&route{httpMethod: http.MethodGet, path: tc.b, segments: splitPath(tc.b), fullMethod: "/B"})
		if tc.overlap != (err != nil) {
			t.Errorf("%s and %s: %v, overlap %v", tc.a, tc.b, err, tc.overlap)
		}
		if err != nil && (!strings.Contains(err.Error(), tc.a) || !strings.Contains(err.Error(), tc.b)) {
			t.Errorf("the refusal does not name both routes: %v", err)
		}
		// Another method never overlaps.
		if err := table.add(&route{httpMethod: http.MethodPost, path: tc.b, segments: splitPath(tc.b), fullMethod: "/C"}); err != nil {
			t.Errorf("POST %s beside GET %s: %v", tc.b, tc.a, err)
		}
	}
	// The gateway's own paths are checked against the contract's.
	if _, err := loadRoutes(map[string]http.HandlerFunc{http.MethodGet + " /get": func(http.ResponseWriter, *http.Request) {}}); err == nil {
		t.Fatal("a gateway path over GET /get was accepted")
	}
}

// TestSegmentsMatchPathIsSplitMatching: walking a path's segments in place
// matches exactly what splitting it and comparing segment by segment
// matches, for every route of the contract and paths made of their
// literals, variables, empty segments and extra or missing segments.
func TestSegmentsMatchPathIsSplitMatching(t *testing.T) {
	patterns := [][]string{{"get"}, {"accounts", "{id}"}, {"accounts", "{id}", "keys"}, {"{a}"}, {"{a}", "{b}"}, {""}, {"a", ""}}
	for _, rt := range allRoutes(contractRoutes()) {
		patterns = append(patterns, rt.segments)
	}
	pieces := []string{"", "get", "accounts", "x", "keys", "{id}", "a"}
	var paths []string
	var grow func(prefix string, depth int)
	grow = func(prefix string, depth int) {
		paths = append(paths, prefix)
		if depth == 4 {
			return
		}
		for _, p := range pieces {
			grow(prefix+"/"+p, depth+1)
		}
	}
	grow("", 0)
	for _, pattern := range patterns {
		for _, path := range paths {
			for _, p := range []string{path, path + "/"} {
				if p == "" {
					continue
				}
				want := segmentsMatch(pattern, splitPath(p))
				if got := segmentsMatchPath(pattern, p[1:]); got != want {
					t.Fatalf("pattern %q, path %q: got %v, want %v", pattern, p, got, want)
				}
			}
		}
	}
}

// segmentsMatch is the rule segmentsMatchPath implements, on a path split
// into its segments by splitPath.
func segmentsMatch(pattern, segs []string) bool {
	if len(pattern) != len(segs) {
		return false
	}
	for i, p := range pattern {
		if isVariable(p) {
			if segs[i] == "" {
				return false
			}
			continue
		}
		if p != segs[i] {
			return false
		}
	}
	return true
}
