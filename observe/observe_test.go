package observe

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// TestObserveAllocatesNothing: once a route's series are resolved, counting
// a request or a gRPC call allocates nothing.
func TestObserveAllocatesNothing(t *testing.T) {
	m := NewMetrics()
	m.ObserveHTTP("/get", http.MethodGet, 200, time.Millisecond)
	m.ObserveRPC("/relay.v1.DocumentService/GetDocument", codes.OK, time.Millisecond)
	if n := testing.AllocsPerRun(100, func() {
		m.ObserveHTTP("/get", http.MethodGet, 200, time.Millisecond)
		m.ObserveRPC("/relay.v1.DocumentService/GetDocument", codes.OK, time.Millisecond)
	}); n != 0 {
		t.Fatalf("%v allocations per observation", n)
	}
}

// TestNilMetrics: a relay without metrics records nothing and does not fail.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveHTTP("/get", http.MethodGet, 200, time.Millisecond)
	m.ObserveRPC("/x", codes.OK, time.Millisecond)
	m.ObserveCommit(time.Millisecond, 1)
}

// TestAccessLabelsAndPassThrough checks the labels of requests the gateway
// did not label, that gRPC requests pass untouched, and that the writer
// keeps Flush for event streams.
func TestAccessLabelsAndPassThrough(t *testing.T) {
	var logs bytes.Buffer
	m := NewMetrics()
	var flushed bool
	h := Access(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rec := RecordFrom(r.Context()); rec == nil {
			if r.Header.Get("Content-Type") != "application/grpc" {
				t.Error("no record in an HTTP request's context")
			}
			return
		}
		if r.URL.Path == "/stream" {
			w.Header().Set("X-Request-Id", "subscribe_1")
			_, _ = w.Write([]byte("data: 1\n\n"))
			_, flushed = w.(http.Flusher)
			w.(http.Flusher).Flush()
			return
		}
		w.WriteHeader(http.StatusNotFound)
	}), AccessOptions{Log: slog.New(slog.NewJSONHandler(&logs, nil)), Metrics: m, Routes: []string{"/docs"},
		Label: func(p string) string {
			if strings.HasPrefix(p, "/api/clients/") {
				return "/api/clients/{clientId}/active"
			}
			return ""
		}})
	for _, path := range []string{"/docs/x.js", "/docsx", "/api/clients/abc/active", "/secret-path", "/stream"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path+"?ticket=t0p", nil))
	}
	grpcReq := httptest.NewRequest(http.MethodPost, "/relay.v1.DocumentService/GetDocument", nil)
	grpcReq.ProtoMajor = 2
	grpcReq.Header.Set("Content-Type", "application/grpc")
	h.ServeHTTP(httptest.NewRecorder(), grpcReq)
	if !flushed {
		t.Error("the access writer hides http.Flusher")
	}
	var routes []string
	for line := range strings.SplitSeq(strings.TrimSpace(logs.String()), "\n") {
		var v map[string]any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		routes = append(routes, v["route"].(string))
		if v["path"] == "/stream" && (v["status"] != 200.0 || v["bytes"] != 9.0 || v["requestId"] != "subscribe_1") {
			t.Errorf("stream line %v", v)
		}
	}
	want := []string{"/docs", "other", "/api/clients/{clientId}/active", "other", "other"}
	if strings.Join(routes, " ") != strings.Join(want, " ") {
		t.Errorf("routes %v, want %v (and no line for the gRPC request)", routes, want)
	}
	if strings.Contains(logs.String(), "t0p") {
		t.Error("the query string was logged")
	}
}
