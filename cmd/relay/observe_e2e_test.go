package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/tabletop-relay/relay/gateway"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// logSink is a log destination safe for the relay's goroutines.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logSink) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines decodes the JSON log lines written so far.
func (b *logSink) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.buf.Bytes()))
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Bytes())
		}
		out = append(out, v)
	}
	return out
}

func (b *logSink) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// accessLines returns the "http" lines of a request id, and the "rpc" lines
// of it.
func accessLines(lines []map[string]any, requestID string) (httpLines, rpcLines []map[string]any) {
	for _, l := range lines {
		if l["requestId"] != requestID {
			continue
		}
		switch l["msg"] {
		case "http":
			httpLines = append(httpLines, l)
		case "rpc":
			rpcLines = append(rpcLines, l)
		}
	}
	return httpLines, rpcLines
}

// scrape reads the metrics and returns the value of each series, keyed by
// its name and labels as the text format writes them.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %s", resp.StatusCode, body)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// TestAccessLogAndMetrics checks the access line of each kind of HTTP
// request, answered or refused before authentication, that a REST call
// writes one line and a gRPC call its rpc line, that no line holds a key,
// and that the metrics count what happened.
func TestAccessLogAndMetrics(t *testing.T) {
	t.Parallel()
	var logs logSink
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	tr := startTestRelayLogged(t, log, func(c *node.Config) {
		c.MetricsListen = "127.0.0.1:0"
		c.CORSOrigins = "https://app.example"
		c.MaxQueryBytes = 1024
		c.RateLimit, c.RateLimitBurst = 600, 40
		c.Build = gateway.BuildInfo{Version: "v1.2.3", Commit: "0123456789abcdef", Date: "2026-01-02T03:04:05Z"}
	})
	if tr.MetricsAddr() == "" {
		t.Fatal("metrics address not set")
	}
	// The metrics are not served on the API's address.
	if resp := tr.Do("GET", "/metrics", tr.AdminKey, nil, nil); resp.Status != http.StatusNotFound {
		t.Fatalf("/metrics on the API's address: %d", resp.Status)
	}

	type want struct {
		method, path string
		status       int
		keyID, world string
		rpc          string
	}
	var checks []struct {
		resp relaytest.Response
		want want
	}
	check := func(resp relaytest.Response, w want) {
		checks = append(checks, struct {
			resp relaytest.Response
			want want
		}{resp, w})
	}
	// The admin key's id, from the key list.
	keyList := tr.Do("GET", "/keys", tr.AdminKey, nil, nil)
	if keyList.Status != http.StatusOK {
		t.Fatalf("GET /keys: %d %s", keyList.Status, keyList.Body)
	}
	adminKeyID := regexp.MustCompile(`"id":"([^"]+)"`).FindStringSubmatch(string(keyList.Body))[1]

	check(tr.Do("GET", "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil), want{"GET", "/get", 200, adminKeyID, "demo", "/relay.v1.DocumentService/GetDocument"})
	check(tr.Do("GET", "/get", "", relaytest.Q("uuid", relaytest.AriaUUID), nil), want{"GET", "/get", 401, "", "", ""})
	check(tr.Do("GET", "/get", "not-a-key", relaytest.Q("uuid", relaytest.AriaUUID), nil), want{"GET", "/get", 401, "", "", ""})
	check(tr.Do("GET", "/no-such-route", tr.AdminKey, nil, nil), want{"GET", "/no-such-route", 404, "", "", ""})
	check(tr.Do("GET", "/get", tr.AdminKey, relaytest.Q("uuid", strings.Repeat("x", 2000)), nil), want{"GET", "/get", 414, "", "", ""})
	check(tr.Do("POST", "/create", tr.AdminKey, nil, strings.Repeat(" ", 70<<10)), want{"POST", "/create", 413, "", "", ""})
	check(tr.Do("PUT", "/update", tr.AdminKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": "Aria"}}), want{"PUT", "/update", 200, adminKeyID, "demo", "/relay.v1.DocumentService/UpdateDocument"})
	preflight := tr.sendWith("OPTIONS", "/get", http.Header{"Origin": {"https://app.example"}, "Access-Control-Request-Method": {"GET"}, "Access-Control-Request-Headers": {"x-api-key"}}, "")

	// A gRPC-native call.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	var hdr metadata.MD
	if _, err := relayv1.NewDocumentServiceClient(tr.Conn).GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}, grpc.Header(&hdr)); err != nil {
		t.Fatalf("gRPC GetDocument: %v", err)
	}

	if resp := tr.Do("GET", "/healthz", "", nil, nil); resp.Status != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.Status)
	}

	// An event stream, with an event delivered to it.
	stream := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	streamID := stream.resp.Header.Get("X-Request-Id")
	connected := stream.expect("connected")[0]
	tr.setHP(relaytest.AriaUUID, 3)
	update := stream.expect("actor-update")[0]
	// The least the stream's access line may count: the two payloads
	// (over HTTP/1.1 the event hub's writers write the update straight to
	// the connection, and the count must include it).
	streamBytes := len(connected.data) + len(update.data)

	// The rate limit refuses a key past its burst.
	limited, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "limited", Scopes: []string{"entity:read"}})
	refused := 0
	for range 60 {
		if tr.Do("GET", "/get", limited, relaytest.Q("uuid", relaytest.AriaUUID), nil).Status == http.StatusTooManyRequests {
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("the rate limit refused nothing")
	}

	// The tabletop module's pairing endpoint, with a bad body.
	if resp := tr.Do("POST", "/auth/pair", "", nil, "{"); resp.Status != http.StatusBadRequest {
		t.Fatalf("POST /auth/pair: %d %s", resp.Status, resp.Body)
	}

	m := scrape(t, tr.MetricsAddr())
	for series, min := range map[string]float64{
		`relay_http_requests_total{method="GET",route="/get",status="200"}`:                   1,
		`relay_http_requests_total{method="GET",route="/get",status="401"}`:                   2,
		`relay_http_requests_total{method="GET",route="other",status="404"}`:                  1,
		`relay_http_requests_total{method="GET",route="/get",status="414"}`:                   1,
		`relay_http_requests_total{method="POST",route="/create",status="413"}`:               1,
		`relay_http_requests_total{method="OPTIONS",route="/get",status="204"}`:               1,
		`relay_http_requests_total{method="GET",route="/get",status="429"}`:                   float64(refused),
		`relay_http_request_duration_seconds_count{method="GET",route="/get"}`:                3,
		`relay_grpc_requests_total{code="OK",method="/relay.v1.DocumentService/GetDocument"}`: 1,
		`relay_http_requests_total{method="POST",route="/auth/pair",status="400"}`:            1,
		`relay_http_requests_total{method="GET",route="/healthz",status="200"}`:               1,
		`relay_worlds`:                                           1,
		`relay_event_streams_open`:                               1,
		`relay_events_delivered_total`:                           1,
		`relay_db_commit_duration_seconds_count`:                 2,
		`relay_db_committed_transactions_total`:                  2,
		`relay_rate_limit_refusals_total{limit="key"}`:           float64(refused),
		`relay_rate_limit_refusals_total{limit="auth_failures"}`: 0,
		`relay_linked_worlds_connected`:                          0,
		`relay_linked_requests_pending`:                          0,
		`relay_linked_events_withheld_total`:                     0,
		`relay_linked_event_lookups_total`:                       0,
		`relay_linked_events_dropped_total`:                      0,
		`relay_connections_open`:                                 1,
		`relay_connection_refusals_total{cap="per_ip"}`:          0,
		`relay_slow_bodies_cut_total`:                            0,
	} {
		v, ok := m[series]
		if !ok {
			t.Errorf("metric %s missing", series)
			continue
		}
		if v < min {
			t.Errorf("metric %s = %v, want at least %v", series, v, min)
		}
	}
	// The build is one series of value 1 that names it.
	build := `relay_build_info{commit="0123456789abcdef",date="2026-01-02T03:04:05Z",goversion="` + runtime.Version() + `",version="v1.2.3"}`
	if v, ok := m[build]; !ok || v != 1 {
		t.Errorf("metric %s = %v (present %v), want 1", build, v, ok)
	}
	// A REST call is not counted as a gRPC call too.
	if v := m[`relay_grpc_requests_total{code="OK",method="/relay.v1.DocumentService/UpdateDocument"}`]; v != 0 {
		t.Errorf("the REST update was counted as a gRPC call: %v", v)
	}
	stream.close()

	// The access lines are written once the answer is sent: wait for the
	// last request's.
	var lines []map[string]any
	deadline := time.Now().Add(10 * time.Second)
	last := checks[len(checks)-1].resp.Header.Get("X-Request-Id")
	for {
		lines = logs.lines(t)
		if h, _ := accessLines(lines, last); len(h) > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, c := range checks {
		id := c.resp.Header.Get("X-Request-Id")
		if id == "" {
			t.Errorf("%s %s: no request id in the answer", c.want.method, c.want.path)
			continue
		}
		h, r := accessLines(lines, id)
		if len(h) != 1 || len(r) != 0 {
			t.Errorf("%s %s (%s): %d http lines and %d rpc lines, want 1 and 0", c.want.method, c.want.path, id, len(h), len(r))
			continue
		}
		l := h[0]
		if l["method"] != c.want.method || l["path"] != c.want.path || l["status"] != float64(c.want.status) {
			t.Errorf("access line %v, want %+v", l, c.want)
		}
		if c.resp.Status != c.want.status {
			t.Errorf("%s %s answered %d, want %d", c.want.method, c.want.path, c.resp.Status, c.want.status)
		}
		if b, _ := l["bytes"].(float64); int(b) != len(c.resp.Body) {
			t.Errorf("access line bytes %v, the body had %d", l["bytes"], len(c.resp.Body))
		}
		// The duration's unit is in its name: milliseconds, a number.
		if ms, ok := l["durationMs"].(float64); !ok || ms < 0 {
			t.Errorf("access line without a durationMs number: %v", l)
		}
		if _, ok := l["duration"]; ok {
			t.Errorf("access line with a duration of no named unit: %v", l)
		}
		for field, v := range map[string]string{"keyId": c.want.keyID, "clientId": c.want.world, "rpc": c.want.rpc} {
			got, _ := l[field].(string)
			if got != v {
				t.Errorf("%s %s: access line %s = %q, want %q", c.want.method, c.want.path, field, got, v)
			}
		}
	}
	// A preflight has no request id: its line is the one OPTIONS line.
	var options []map[string]any
	for _, l := range lines {
		if l["msg"] == "http" && l["method"] == "OPTIONS" {
			options = append(options, l)
		}
	}
	if len(options) != 1 || options[0]["path"] != "/get" || options[0]["status"] != float64(preflight.Status) || options[0]["route"] != "/get" {
		t.Errorf("preflight (%d): access lines %v", preflight.Status, options)
	}
	// The event stream's line, once it ended.
	for deadline := time.Now().Add(10 * time.Second); ; {
		h, r := accessLines(logs.lines(t), streamID)
		if len(h) == 1 {
			if len(r) != 0 || h[0]["path"] != "/actor/subscribe" || h[0]["route"] != "/actor/subscribe" || h[0]["status"] != 200.0 || h[0]["rpc"] != "/relay.v1.EventService/SubscribeActors" {
				t.Errorf("event stream %s: lines %v and %v", streamID, h, r)
			}
			if b, _ := h[0]["bytes"].(float64); int(b) < streamBytes {
				t.Errorf("event stream %s: access line bytes %v, fewer than its events' %d", streamID, h[0]["bytes"], streamBytes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("no access line for the event stream %s", streamID)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The gRPC call has its rpc line and no access line.
	if id := firstOf(hdr.Get("x-request-id")); id == "" {
		t.Error("gRPC call without a request id")
	} else if h, r := accessLines(lines, id); len(h) != 0 || len(r) != 1 || r[0]["code"] != "OK" || r[0]["method"] != "/relay.v1.DocumentService/GetDocument" {
		t.Errorf("gRPC call: %d http lines, rpc lines %v", len(h), r)
	}
	// No line holds a key, nor a query string.
	all := logs.String()
	for _, secret := range []string{tr.AdminKey, limited, "not-a-key", "uuid="} {
		if strings.Contains(all, secret) {
			t.Errorf("the log holds %q", secret)
		}
	}
}

// TestMetricsOffByDefault checks that no metrics are served unless asked.
func TestMetricsOffByDefault(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	if tr.Metrics() != nil || tr.MetricsAddr() != "" {
		t.Fatal("metrics on without --metrics-listen")
	}
	if resp := tr.Do("GET", "/metrics", tr.AdminKey, nil, nil); resp.Status != http.StatusNotFound {
		t.Fatalf("/metrics: %d", resp.Status)
	}
}
