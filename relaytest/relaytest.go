// Package relaytest starts real relays in process for end-to-end tests.
//
// Start runs a whole relay node (package node: the stores, the services,
// the REST gateway and the network) on a loopback port, with a fresh data
// directory holding the demo world, and stops it when the test ends.
// Tests then speak to it as clients do: REST through Do, gRPC through
// Conn, with the admin key the relay created (AdminKey) or keys made with
// NewKey. The node itself is embedded, so a test may also reach its parts
// (Keys, Worlds, Links, ...) to set up a state or check one.
//
//	func TestSomething(t *testing.T) {
//		r := relaytest.Start(t, func(c *node.Config) { c.RateLimit = 3 })
//		resp := r.Do("GET", "/get", r.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil)
//		if resp.Status != http.StatusOK { ... }
//	}
//
// A package whose tests run execute-js scripts on a relay must let its test
// binary serve as a script worker: its TestMain calls Main (or
// script.WorkerMain before anything else).
package relaytest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/internal/racesuppress"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/world/script"
)

// Ids of the demo world's documents and users that tests use.
const (
	AriaUUID    = "Actor.ariaVale00000001"
	BromUUID    = "Actor.bromIronfist0001"
	GoblinUUID  = "Actor.goblin0000000001"
	GuardUUID   = "Actor.townGuard0000001"
	MaraUUID    = "Actor.innkeeperMara001"
	AliceID     = "aliceUser0000001"
	WandUUID    = "Actor.ariaVale00000001.Item.wandMagicMissile"
	PotionUUID  = "Item.potionHealing001"
	HeroesID    = "heroesFolder0001"
	TavernScene = "Scene.tavernScene00001"
)

// DiceSeed seeds the dice of every relay Start runs: a test whose outcome
// depends on a roll passes or fails the same way every run.
const DiceSeed = 20261122

// Main runs a package's tests with the test binary able to serve as an
// execute-js worker, as the relay binary does: the relays the tests start
// run their scripts by starting the test binary again (see script.Pool).
// Under the race detector, the test binary (not a worker) starts again
// with the suppression of a known race inside nats-server (racesuppress).
// Call it from TestMain.
func Main(m *testing.M) {
	script.WorkerMain()
	racesuppress.Apply()
	os.Exit(m.Run())
}

// Relay is a relay started in process on a loopback port.
type Relay struct {
	*node.Node
	t testing.TB
	// DataDir is the relay's data directory.
	DataDir string
	// Base is the relay's HTTP address, such as http://127.0.0.1:41234.
	Base string
	// AdminKey is the admin API key the relay created on its first start
	// ("" when the data directory already had one).
	AdminKey string
	// Client is the HTTP client Do uses.
	Client *http.Client
	// Conn is a gRPC client of the relay's port, as external gRPC callers
	// use it (h2c).
	Conn *grpc.ClientConn
}

// Config is the configuration Start begins with, before its mutators: a
// loopback port, a fresh data directory with the demo world, small
// request bounds, seeded dice, and the time-outs of slow and idle clients
// as in production. Unlike `relay serve`'s defaults, the rate limits and
// connection caps stay off, since every test client shares the loopback
// address (the tests of those limits set their own).
func Config(t testing.TB) node.Config {
	d := node.DefaultConfig()
	return node.Config{
		Listen:            "127.0.0.1:0",
		DataDir:           t.TempDir(),
		Demo:              true,
		NodeID:            1,
		MaxBodyBytes:      64 << 10,
		ScriptTimeout:     2 * time.Second,
		DiceSeed:          DiceSeed,
		ReadHeaderTimeout: d.ReadHeaderTimeout,
		BodyReadTimeout:   d.BodyReadTimeout,
		BodyMinRate:       d.BodyMinRate,
		IdleTimeout:       d.IdleTimeout,
		WriteStallTimeout: d.WriteStallTimeout,
		Build:             d.Build,
	}
}

// Start starts a relay configured by Config and then mutate, in order; it
// is stopped when the test ends. It fails the test when the relay cannot
// start.
func Start(t testing.TB, mutate ...func(*node.Config)) *Relay {
	t.Helper()
	return StartLogged(t, slog.New(slog.DiscardHandler), mutate...)
}

// StartLogged starts a relay, as Start does, that logs to log.
func StartLogged(t testing.TB, log *slog.Logger, mutate ...func(*node.Config)) *Relay {
	t.Helper()
	cfg := Config(t)
	for _, m := range mutate {
		m(&cfg)
	}
	var out bytes.Buffer
	n, err := node.Start(context.Background(), cfg, log, &out)
	if err != nil {
		t.Fatalf("start relay: %v", err)
	}
	conn, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		_ = n.Close(context.Background())
		t.Fatalf("dial relay: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close()
		if err := n.Close(ctx); err != nil {
			t.Errorf("close relay: %v", err)
		}
	})
	return &Relay{
		Node:     n,
		t:        t,
		DataDir:  cfg.DataDir,
		Base:     "http://" + n.Addr(),
		AdminKey: n.AdminKey(),
		Client:   &http.Client{Timeout: 10 * time.Second},
		Conn:     conn,
	}
}

// Response is a REST answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a generic object, failing the test when it
// is not one.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("body is not a JSON object: %v\n%s", err, r.Body)
	}
	return v
}

// Data returns the envelope's data object, failing the test when there is
// none.
func (r Response) Data(t testing.TB) map[string]any {
	t.Helper()
	d, ok := r.JSON(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object in %s", r.Body)
	}
	return d
}

// ErrorText returns the error body's message ("" when there is none).
func (r Response) ErrorText(t testing.TB) string {
	t.Helper()
	s, _ := r.JSON(t)["error"].(string)
	return s
}

// Do sends a REST request with the given key ("" for none), query (nil for
// none) and body: nil for none, a string or []byte as it is, anything else
// encoded as JSON. A body is sent as application/json. Do fails the test
// when the request cannot be made or its answer read.
func (r *Relay) Do(method, path, key string, query url.Values, body any) Response {
	r.t.Helper()
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
			r.t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	u := r.Base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, rd)
	if err != nil {
		r.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.Client.Do(req)
	if err != nil {
		r.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

// NewKey creates a key through the gRPC API with the admin key and returns
// its plaintext and id.
func (r *Relay) NewKey(req *relayv1.CreateKeyRequest) (key, id string) {
	r.t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", r.AdminKey)
	resp, err := relayv1.NewKeyServiceClient(r.Conn).CreateKey(ctx, req)
	if err != nil {
		r.t.Fatalf("create key: %v", err)
	}
	return resp.GetKey(), resp.GetApiKey().GetId()
}

// Q builds query values from name, value pairs.
func Q(pairs ...string) url.Values {
	v := url.Values{}
	for i := 0; i+1 < len(pairs); i += 2 {
		v.Set(pairs[i], pairs[i+1])
	}
	return v
}
