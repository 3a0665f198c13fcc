package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"relay/contract"
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

// TestRoutesIndependentOfOrder registers the contract's REST patterns with
// grpc-gateway's mux in many orders, and checks that each route's path and
// method reach that route's RPC in every one of them, and that the route
// table (which the gateway dispatches by) finds the same route. Near misses
// (a trailing slash, another method) reach nothing.
func TestRoutesIndependentOfOrder(t *testing.T) {
	t.Parallel()
	table := contractRoutes()
	routes := allRoutes(table)
	if len(routes) < 50 {
		t.Fatalf("only %d routes in the contract", len(routes))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		order := slices.Clone(routes)
		if round > 0 {
			rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		} else {
			slices.Reverse(order)
		}
		mux := runtime.NewServeMux(runtime.WithDisablePathLengthFallback())
		for _, rt := range order {
			if err := mux.HandlePath(rt.httpMethod, rt.path, func(w http.ResponseWriter, _ *http.Request, _ map[string]string) {
				fmt.Fprint(w, rt.name())
			}); err != nil {
				t.Fatal(err)
			}
		}
		for _, rt := range routes {
			path := samplePath(rt)
			if got := table.match(rt.httpMethod, path); got != rt {
				t.Fatalf("the table sends %s %s to %v, want %s", rt.httpMethod, path, got, rt.name())
			}
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(rt.httpMethod, path, nil))
			if rec.Code != http.StatusOK || rec.Body.String() != rt.name() {
				t.Fatalf("order %d: %s %s reached %d %q, want %s", round, rt.httpMethod, path, rec.Code, rec.Body.String(), rt.name())
			}
			for _, miss := range []string{path + "/", "/" + path, path + "/x"} {
				if got := table.match(rt.httpMethod, miss); got != nil {
					t.Fatalf("the table sends %s %s to %s", rt.httpMethod, miss, got.name())
				}
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(rt.httpMethod, miss, nil))
				if rec.Code == http.StatusOK {
					t.Fatalf("the mux sends %s %s to %s", rt.httpMethod, miss, rec.Body.String())
				}
			}
		}
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

// TestBindServicesAnyOrder binds the contract's services with the real
// generated registrations in several orders, and checks that every route
// reaches its RPC through the mux whatever the order.
func TestBindServicesAnyOrder(t *testing.T) {
	t.Parallel()
	table := contractRoutes()
	rng := rand.New(rand.NewPCG(3, 4))
	services := slices.Clone(contract.Services)
	for round := range 5 {
		rng.Shuffle(len(services), func(i, j int) { services[i], services[j] = services[j], services[i] })
		rec := &recordingConn{}
		mux := runtime.NewServeMux(runtime.WithDisablePathLengthFallback())
		if err := bindServices(context.Background(), mux, rec, slices.All(services)); err != nil {
			t.Fatal(err)
		}
		for _, rt := range allRoutes(table) {
			rec.method = ""
			req := httptest.NewRequest(rt.httpMethod, samplePath(rt), strings.NewReader("{}"))
			mux.ServeHTTP(httptest.NewRecorder(), req)
			if rec.method != rt.fullMethod {
				t.Fatalf("order %d: %s %s called %q, want %s", round, rt.httpMethod, samplePath(rt), rec.method, rt.fullMethod)
			}
		}
	}
}

// recordingConn is a client connection that records the method of the
// last call and fails it.
type recordingConn struct {
	method string
}

func (c *recordingConn) Invoke(_ context.Context, method string, _, _ any, _ ...grpc.CallOption) error {
	c.method = method
	return status.Error(codes.Unavailable, "recorded")
}

func (c *recordingConn) NewStream(_ context.Context, _ *grpc.StreamDesc, method string, _ ...grpc.CallOption) (grpc.ClientStream, error) {
	c.method = method
	return nil, status.Error(codes.Unavailable, "recorded")
}
