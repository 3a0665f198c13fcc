package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/netlimit"
)

// Ids of the demo world used throughout the tests.
const (
	ariaUUID    = "Actor.ariaVale00000001"
	bromUUID    = "Actor.bromIronfist0001"
	goblinUUID  = "Actor.goblin0000000001"
	guardUUID   = "Actor.townGuard0000001"
	maraUUID    = "Actor.innkeeperMara001"
	aliceID     = "aliceUser0000001"
	wandUUID    = "Actor.ariaVale00000001.Item.wandMagicMissile"
	potionUUID  = "Item.potionHealing001"
	heroesID    = "heroesFolder0001"
	tavernScene = "Scene.tavernScene00001"
)

// testRelay is a relay started in process on a loopback port with a fresh
// data directory holding the demo world.
type testRelay struct {
	*relay
	t        *testing.T
	dataDir  string
	base     string
	adminKey string
	client   *http.Client
	// conn is a gRPC client of the relay's port, as external gRPC callers
	// use it (h2c).
	conn *grpc.ClientConn
}

// startTestRelay starts a relay; it is stopped when the test ends.
func startTestRelay(t *testing.T, mutate ...func(*serveConfig)) *testRelay {
	t.Helper()
	return startTestRelayLogged(t, slog.New(slog.DiscardHandler), mutate...)
}

// startTestRelayLogged starts a relay that logs to log.
func startTestRelayLogged(t *testing.T, log *slog.Logger, mutate ...func(*serveConfig)) *testRelay {
	t.Helper()
	cfg := serveConfig{
		listen:        "127.0.0.1:0",
		dataDir:       t.TempDir(),
		demo:          true,
		nodeID:        1,
		maxBodyBytes:  64 << 10,
		scriptTimeout: 2 * time.Second,
		// Fixed rolls: a test whose outcome depends on a roll passes or
		// fails the same way every run.
		diceSeed: 20261122,
		// The time-outs of slow and idle clients as in production; the
		// connection caps stay off, since every test client shares the
		// loopback address (the tests of the caps set their own).
		readHeaderTimeout: defaultReadHeaderTimeout,
		bodyReadTimeout:   netlimit.DefaultBodyReadTimeout,
		bodyMinRate:       netlimit.DefaultBodyMinRate,
		idleTimeout:       defaultIdleTimeout,
		writeStallTimeout: netlimit.DefaultWriteStallTimeout,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	var out bytes.Buffer
	r, err := startRelay(context.Background(), cfg, log, &out)
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	conn, err := grpc.NewClient(r.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial relay: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close()
		if err := r.close(ctx); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})
	return &testRelay{relay: r, t: t, dataDir: cfg.dataDir, base: "http://" + r.addr, adminKey: r.adminKey, client: &http.Client{Timeout: 10 * time.Second}, conn: conn}
}

// response is a REST answer.
type response struct {
	status int
	header http.Header
	body   []byte
}

// json decodes the body into a generic value.
func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.body)
	}
	return v
}

// data returns the envelope's data object.
func (r response) data(t *testing.T) map[string]any {
	t.Helper()
	d, ok := r.json(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object in %s", r.body)
	}
	return d
}

// errorText returns the error body's message.
func (r response) errorText(t *testing.T) string {
	t.Helper()
	s, _ := r.json(t)["error"].(string)
	return s
}

// do sends a REST request with the given key ("" for none), query and JSON
// body (nil for none).
func (tr *testRelay) do(method, path, key string, query url.Values, body any) response {
	tr.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			tr.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	u := tr.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		tr.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := tr.client.Do(req)
	if err != nil {
		tr.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tr.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: data}
}

// newKey creates a key through the API with the admin key.
func (tr *testRelay) newKey(req *relayv1.CreateKeyRequest) (string, string) {
	tr.t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	resp, err := relayv1.NewKeyServiceClient(tr.conn).CreateKey(ctx, req)
	if err != nil {
		tr.t.Fatalf("create key: %v", err)
	}
	return resp.GetKey(), resp.GetApiKey().GetId()
}

// q builds query values from pairs.
func q(pairs ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Set(pairs[i], pairs[i+1])
	}
	return v
}
