package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// accountWithWorld makes an account with the given quotas and an embedded
// demo world of its own, and returns the account's id, key and world.
func accountWithWorld(t *testing.T, tr *testRelay, name string, quotas map[string]any) (id, key, world string) {
	t.Helper()
	id, key = createAccount(t, tr, name)
	world = strings.ToLower(name) + "-world"
	if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"clientId": world, "title": name, "seed": "demo"}); r.Status != http.StatusOK {
		t.Fatalf("POST /worlds: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPatch, "/accounts/"+id, tr.AdminKey, nil, map[string]any{"quotas": quotas}); r.Status != http.StatusOK {
		t.Fatalf("PATCH /accounts/%s: %d %s", id, r.Status, r.Body)
	}
	return id, key, world
}

// usageOf reads an account's usage with the operator's key.
func (tr *testRelay) usageOf(id string) map[string]any {
	tr.t.Helper()
	r := tr.Do(http.MethodGet, "/accounts/"+id, tr.AdminKey, nil, nil)
	if r.Status != http.StatusOK {
		tr.t.Fatalf("GET /accounts/%s: %d %s", id, r.Status, r.Body)
	}
	return r.Data(tr.t)["account"].(map[string]any)["usage"].(map[string]any)
}

// TestQuotaRequestsPerMinute: an account's keys together make at most
// its requests a minute, on REST and gRPC; past it they get 429 with
// Retry-After naming the quota, while another account is not held back.
func TestQuotaRequestsPerMinute(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	id, key, world := accountWithWorld(t, tr, "Chatty", map[string]any{"requestsPerMinute": 6})
	second := tr.Do(http.MethodPost, "/keys", key, nil, map[string]any{"name": "second", "scopes": []string{"entity:read"}}).Data(t)["key"].(string)
	_, other, _ := accountWithWorld(t, tr, "Quiet", map[string]any{})
	get := func(k string) relaytest.Response {
		return tr.Do(http.MethodGet, "/get", k, relaytest.Q("clientId", world, "uuid", relaytest.GoblinUUID), nil)
	}
	// The PATCH above counted nothing against the account (it is the
	// operator's call); the POST /keys did. Both keys share the rest.
	ok := 1
	for i := 0; ok < 6 && i < 10; i++ {
		k := key
		if i%2 == 1 {
			k = second
		}
		if r := get(k); r.Status != http.StatusOK {
			t.Fatalf("call %d within the quota: %d %s", ok+1, r.Status, r.Body)
		}
		ok++
	}
	r := get(second)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" || !strings.Contains(r.ErrorText(t), "'requestsPerMinute'") {
		t.Fatalf("call past the quota: %d Retry-After %q %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	if _, err := relayv1.NewClientServiceClient(tr.Conn).ListClients(ctx, &relayv1.ListClientsRequest{}); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "'requestsPerMinute'") {
		t.Fatalf("gRPC call past the quota: %v", err)
	}
	if r := tr.Do(http.MethodGet, "/clients", other, nil, nil); r.Status != http.StatusOK {
		t.Fatalf("another account meanwhile: %d %s", r.Status, r.Body)
	}
	if u := tr.usageOf(id); u["requestsThisMinute"] != float64(6) {
		t.Fatalf("usage: %v, want 6 requests this minute", u)
	}
}

// TestQuotaStreams: an account's keys together hold at most its quota of
// open event streams, over SSE and gRPC; past it they get 403 naming the
// quota; closing one makes room again.
func TestQuotaStreams(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	id, key, world := accountWithWorld(t, tr, "Streamer", map[string]any{"streams": 1})
	first := tr.openStream("/hooks/subscribe", key, relaytest.Q("clientId", world), nil)
	first.expect("connected")
	if u := tr.usageOf(id); u["streams"] != float64(1) {
		t.Fatalf("usage with one stream open: %v", u)
	}
	resp, cancel := tr.startStream("/hooks/subscribe", key, relaytest.Q("clientId", world), nil)
	cancel()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a second SSE stream: %d", resp.StatusCode)
	}
	ctx, stop := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key), 5*time.Second)
	defer stop()
	s, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{ClientId: world})
	if err == nil {
		_, err = s.Recv()
	}
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "'streams'") {
		t.Fatalf("a second stream over gRPC: %v", err)
	}
	first.close()
	deadline := time.Now().Add(5 * time.Second)
	for tr.usageOf(id)["streams"] != nil && tr.usageOf(id)["streams"] != float64(0) {
		if time.Now().After(deadline) {
			t.Fatal("the closed stream still counts")
		}
		time.Sleep(20 * time.Millisecond)
	}
	again := tr.openStream("/hooks/subscribe", key, relaytest.Q("clientId", world), nil)
	again.expect("connected")
}

// TestQuotaUploadAndStoredBytes: an upload larger than the account's
// bytes a file, or than what its stored bytes leave, is refused with 403
// naming the quota over REST and gRPC, and leaves nothing; an account
// whose worlds fill its stored bytes makes no new world.
func TestQuotaUploadAndStoredBytes(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxUploadBytes = 1 << 20 })
	id, key, world := accountWithWorld(t, tr, "Uploader", map[string]any{"uploadBytes": 100})
	filesDir := filepath.Join(tr.DataDir, "worlds", world, "files")

	body, ct := multipartBody(t, [][2]string{{"clientId", world}, {"path", "up"}}, "small.txt", bytes.Repeat([]byte("s"), 100))
	if r := tr.send(http.MethodPost, "/upload", key, nil, body, ct); r.Status != http.StatusOK {
		t.Fatalf("an upload within the quota: %d %s", r.Status, r.Body)
	}
	body, ct = multipartBody(t, [][2]string{{"clientId", world}, {"path", "up"}}, "big.txt", bytes.Repeat([]byte("b"), 101))
	if r := tr.send(http.MethodPost, "/upload", key, nil, body, ct); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'uploadBytes'") {
		t.Fatalf("an upload over the quota: %d %s", r.Status, r.Body)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	up, err := relayv1.NewFileServiceClient(tr.Conn).UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = up.Send(&relayv1.UploadFileRequest{ClientId: world, Path: "up", Filename: "grpc.bin", Chunk: bytes.Repeat([]byte("g"), 60)})
	_ = up.Send(&relayv1.UploadFileRequest{Chunk: bytes.Repeat([]byte("g"), 60)})
	if _, err := up.CloseAndRecv(); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "'uploadBytes'") {
		t.Fatalf("a gRPC upload over the quota: %v", err)
	}
	for _, name := range []string{"big.txt", "grpc.bin"} {
		if _, err := os.Stat(filepath.Join(filesDir, "up", name)); err == nil {
			t.Errorf("the refused upload %s was kept", name)
		}
	}
	// The operator's account is not bound by the default quotas.
	body, ct = multipartBody(t, [][2]string{{"clientId", "demo"}, {"path", "up"}}, "big.txt", bytes.Repeat([]byte("b"), 101))
	if r := tr.send(http.MethodPost, "/upload", tr.AdminKey, nil, body, ct); r.Status != http.StatusOK {
		t.Fatalf("the operator's upload: %d %s", r.Status, r.Body)
	}

	// Stored bytes: the demo world alone holds more than 1 KiB.
	if r := tr.Do(http.MethodPatch, "/accounts/"+id, tr.AdminKey, nil, map[string]any{"quotas": map[string]any{"storedBytes": 1024}}); r.Status != http.StatusOK {
		t.Fatalf("PATCH: %d %s", r.Status, r.Body)
	}
	body, ct = multipartBody(t, [][2]string{{"clientId", world}, {"path", "up"}}, "tiny.txt", []byte("t"))
	if r := tr.send(http.MethodPost, "/upload", key, nil, body, ct); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'storedBytes'") {
		t.Fatalf("an upload past the stored bytes: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodPost, "/worlds", key, nil, map[string]any{"title": "More", "seed": "empty"}); r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'storedBytes'") {
		t.Fatalf("a world past the stored bytes: %d %s", r.Status, r.Body)
	}
	// Document writes to its world are refused too, over REST and gRPC,
	// and change nothing; removing a document stays allowed.
	r := tr.Do(http.MethodPut, "/update", key, relaytest.Q("clientId", world), map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"name": "Grown"}})
	if r.Status != http.StatusForbidden || !strings.Contains(r.ErrorText(t), "'storedBytes'") {
		t.Fatalf("an update past the stored bytes: %d %s", r.Status, r.Body)
	}
	ctx = metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
	if _, err := relayv1.NewDocumentServiceClient(tr.Conn).CreateDocument(ctx, &relayv1.CreateDocumentRequest{ClientId: world, EntityType: "JournalEntry"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "'storedBytes'") {
		t.Fatalf("a gRPC create past the stored bytes: %v", err)
	}
	got := tr.Do(http.MethodGet, "/get", key, relaytest.Q("clientId", world, "uuid", relaytest.GoblinUUID), nil)
	if got.Status != http.StatusOK || strings.Contains(string(got.Body), "Grown") {
		t.Fatalf("the goblin after the refused update: %d %s", got.Status, got.Body)
	}
	if r := tr.Do(http.MethodDelete, "/delete", key, relaytest.Q("clientId", world, "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("a removal past the stored bytes: %d %s", r.Status, r.Body)
	}
	if u := tr.usageOf(id); u["worlds"] != float64(1) {
		t.Fatalf("usage after the refusals: %v", u)
	}
}

// TestWorldMemoryBound: a world whose database holds what
// --world-memory-bytes leaves beside its kept events takes no more
// writes, over REST and gRPC, and the refused write changes nothing;
// removals pass. A bound that leaves the documents no room beside the
// kept events does not start.
func TestWorldMemoryBound(t *testing.T) {
	t.Parallel()
	const ring = 1 << 20
	tr := startTestRelay(t, func(c *node.Config) {
		c.MaxBodyBytes = 2 << 20
		c.EventRingBytes = ring
		c.WorldMemoryBytes = ring + 2<<20
	})
	var refused relaytest.Response
	last := ""
	for i := range 20 {
		bio := strings.Repeat(string(rune('a'+i%26)), 600<<10)
		r := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("clientId", "demo"),
			map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"system.details.biography.value": bio}})
		if r.Status != http.StatusOK {
			refused = r
			break
		}
		last = bio[:1]
	}
	if refused.Status != http.StatusForbidden || !strings.Contains(refused.ErrorText(t), "World size limit") || last == "" {
		t.Fatalf("writes past the world's bound: %d %.300s (last accepted %q)", refused.Status, refused.Body, last)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	if _, err := relayv1.NewDocumentServiceClient(tr.Conn).CreateDocument(ctx, &relayv1.CreateDocumentRequest{ClientId: "demo", EntityType: "JournalEntry"}); status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "World size limit") {
		t.Fatalf("a gRPC create past the world's bound: %v", err)
	}
	got := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID), nil)
	if !strings.Contains(string(got.Body), strings.Repeat(last, 100)) {
		t.Fatalf("the refused write changed the document: %.200s", got.Body)
	}
	if r := tr.Do(http.MethodDelete, "/delete", tr.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("a removal past the world's bound: %d %s", r.Status, r.Body)
	}

	cfg := relaytest.Config(t)
	cfg.EventRingBytes, cfg.WorldMemoryBytes = 8<<20, 8<<20
	if r, err := node.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), io.Discard); err == nil {
		_ = r.Close(context.Background())
		t.Fatal("a relay whose world bound leaves no room beside the kept events started")
	} else if _, ok := errors.AsType[*node.ConfigError](err); !ok || !strings.Contains(err.Error(), "world-memory-bytes") {
		t.Fatalf("the refusal: %v", err)
	}
}
