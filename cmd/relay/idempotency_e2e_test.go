package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// doKeyed sends a REST write with an Idempotency-Key header (none when
// idemKey is nil).
func doKeyed(t *testing.T, r *relaytest.Relay, method, path, apiKey string, idemKey *string, body any) relaytest.Response {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, r.Base+path, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", apiKey)
	req.Header.Set("Content-Type", "application/json")
	if idemKey != nil {
		req.Header["Idempotency-Key"] = []string{*idemKey}
	}
	resp, err := r.Client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: out}
}

// goldOf reads Brom's gold pieces in a world.
func goldOf(t *testing.T, r *relaytest.Relay, apiKey, clientID string) float64 {
	t.Helper()
	resp := r.Do(http.MethodGet, "/get", apiKey, relaytest.Q("clientId", clientID, "uuid", relaytest.BromUUID), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("get Brom: %d %s", resp.Status, resp.Body)
	}
	var env struct {
		Data struct {
			System struct {
				Currency struct {
					GP float64 `json:"gp"`
				} `json:"currency"`
			} `json:"system"`
		} `json:"data"`
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		t.Fatal(err)
	}
	return env.Data.System.Currency.GP
}

func keyOf(s string) *string { return &s }

func goldIncrease(clientID string, amount float64) map[string]any {
	return map[string]any{"clientId": clientID, "uuid": relaytest.BromUUID, "attribute": "system.currency.gp", "amount": amount}
}

// TestIdempotencyKeyREST sends writes with an Idempotency-Key over REST: a
// retry gets the first answer, body and all, and the world changes once;
// the key reused for another request is refused with 409 naming it and
// changes nothing; a malformed key is refused with 400 naming the header;
// the keys are the caller's account's own; and a relay started again on
// the same data still knows them.
func TestIdempotencyKeyREST(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := relaytest.Start(t, func(c *node.Config) { c.DataDir = dir })
	admin := r.AdminKey
	gold := goldOf(t, r, admin, "demo")

	first := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf("order-1"), goldIncrease("demo", 5))
	if first.Status != http.StatusOK {
		t.Fatalf("first increase: %d %s", first.Status, first.Body)
	}
	if first.Header.Get("Idempotent-Replay") != "" {
		t.Errorf("a first request is marked as replayed: %q", first.Header.Get("Idempotent-Replay"))
	}
	for i := range 2 {
		again := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf("order-1"), goldIncrease("demo", 5))
		if again.Status != first.Status || !bytes.Equal(again.Body, first.Body) {
			t.Fatalf("retry %d: %d %s; the first answer was %d %s", i, again.Status, again.Body, first.Status, first.Body)
		}
		if got, want := again.Header.Get("Idempotent-Replay"), first.Header.Get("X-Request-Id"); got != want {
			t.Errorf("retry %d: Idempotent-Replay %q, want the first request id %q", i, got, want)
		}
	}
	if got := goldOf(t, r, admin, "demo"); got != gold+5 {
		t.Fatalf("gold after a write sent three times with one key: %v, want %v", got, gold+5)
	}

	// The same key with other parameters, or on another route: refused,
	// nothing changed.
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, "/increase", goldIncrease("demo", 6)},
		{http.MethodPost, "/decrease", goldIncrease("demo", 5)},
	} {
		resp := doKeyed(t, r, c.method, c.path, admin, keyOf("order-1"), c.body)
		if resp.Status != http.StatusConflict || !strings.Contains(resp.ErrorText(t), `Idempotency-Key "order-1"`) || !strings.Contains(resp.ErrorText(t), "different request") {
			t.Errorf("%s %s with a used key: %d %s", c.method, c.path, resp.Status, resp.Body)
		}
	}
	if got := goldOf(t, r, admin, "demo"); got != gold+5 {
		t.Fatalf("gold after refused reuses of a key: %v, want %v", got, gold+5)
	}

	// Malformed keys: 400 naming the header, nothing changed.
	for name, k := range map[string]string{
		"empty":      "",
		"too long":   strings.Repeat("k", 256),
		"not ASCII":  "clé-1",
		"with a tab": "a\tb",
	} {
		resp := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf(k), goldIncrease("demo", 1))
		if resp.Status != http.StatusBadRequest || !strings.Contains(resp.ErrorText(t), "Idempotency-Key") {
			t.Errorf("%s key: %d %s", name, resp.Status, resp.Body)
		}
	}
	if resp := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf(strings.Repeat("k", 255)), goldIncrease("demo", 1)); resp.Status != http.StatusOK {
		t.Errorf("a key of 255 characters: %d %s", resp.Status, resp.Body)
	}
	if got := goldOf(t, r, admin, "demo"); got != gold+6 {
		t.Fatalf("gold after malformed keys: %v, want %v", got, gold+6)
	}

	// Another account's key is a key never seen: the operator and the
	// account's own key use "shared" on the account's world, each applied.
	_, acctKey := createAccount(t, &testRelay{Relay: r, t: t}, "Guild")
	if resp := r.Do(http.MethodPost, "/worlds", acctKey, nil, map[string]any{"clientId": "guild-hall", "title": "Guild Hall", "seed": "demo"}); resp.Status != http.StatusOK {
		t.Fatalf("create the account's world: %d %s", resp.Status, resp.Body)
	}
	guildGold := goldOf(t, r, acctKey, "guild-hall")
	byOperator := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf("shared"), goldIncrease("guild-hall", 3))
	byAccount := doKeyed(t, r, http.MethodPost, "/increase", acctKey, keyOf("shared"), goldIncrease("guild-hall", 3))
	if byOperator.Status != http.StatusOK || byAccount.Status != http.StatusOK || byAccount.Header.Get("Idempotent-Replay") != "" {
		t.Fatalf("one key, two accounts: %d %s / %d %s (replay %q)", byOperator.Status, byOperator.Body, byAccount.Status, byAccount.Body, byAccount.Header.Get("Idempotent-Replay"))
	}
	// Other parameters under the other account's key are not a conflict.
	if resp := doKeyed(t, r, http.MethodPost, "/increase", acctKey, keyOf("order-1"), goldIncrease("guild-hall", 4)); resp.Status != http.StatusOK {
		t.Fatalf("the operator's key on the account's world: %d %s", resp.Status, resp.Body)
	}
	if got := goldOf(t, r, acctKey, "guild-hall"); got != guildGold+10 {
		t.Fatalf("the account's world's gold: %v, want %v", got, guildGold+10)
	}
	// The same key on another world is another key.
	if resp := doKeyed(t, r, http.MethodPost, "/increase", admin, keyOf("order-1"), goldIncrease("guild-hall", 5)); resp.Status != http.StatusOK || resp.Header.Get("Idempotent-Replay") != "" {
		t.Fatalf("a key used on another world: %d %s", resp.Status, resp.Body)
	}

	// A relay started again on the same data answers the retry from what
	// the world's database kept.
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	again := relaytest.Start(t, func(c *node.Config) { c.DataDir = dir })
	retry := doKeyed(t, again, http.MethodPost, "/increase", admin, keyOf("order-1"), goldIncrease("demo", 5))
	if retry.Status != first.Status || !bytes.Equal(retry.Body, first.Body) {
		t.Fatalf("retry after a restart: %d %s; the first answer was %d %s", retry.Status, retry.Body, first.Status, first.Body)
	}
	if got := goldOf(t, again, admin, "demo"); got != gold+6 {
		t.Fatalf("gold after a retry following a restart: %v, want %v", got, gold+6)
	}
}

// TestIdempotencyKeyGRPC does over gRPC what TestIdempotencyKeyREST does
// over REST, and sends one keyed write many times at once: it is applied
// once, and every answer is the first one or a 409 saying it is in
// progress.
func TestIdempotencyKeyGRPC(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	docs := relayv1.NewDocumentServiceClient(r.Conn)
	call := func(idemKey string, amount float64) (*relayv1.IncreaseAttributeResponse, metadata.MD, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", r.AdminKey, "idempotency-key", idemKey)
		var header metadata.MD
		resp, err := docs.IncreaseAttribute(ctx, &relayv1.IncreaseAttributeRequest{ClientId: "demo", Uuid: relaytest.BromUUID, Attribute: "system.currency.gp", Amount: proto.Float64(amount)}, grpc.Header(&header))
		return resp, header, err
	}
	gold := goldOf(t, r, r.AdminKey, "demo")
	first, hdr, err := call("grpc-1", 2)
	if err != nil {
		t.Fatal(err)
	}
	firstID := hdr.Get("x-request-id")
	again, hdr, err := call("grpc-1", 2)
	if err != nil || !proto.Equal(again, first) {
		t.Fatalf("retry: %v %v; first %v", again, err, first)
	}
	if got := hdr.Get("idempotent-replay"); len(got) != 1 || got[0] != firstID[0] {
		t.Errorf("retry's idempotent-replay header: %q, want %q", got, firstID)
	}
	if _, _, err := call("grpc-1", 3); status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), `"grpc-1"`) {
		t.Errorf("used key, other amount: %v", err)
	}
	if _, _, err := call(strings.Repeat("x", 256), 1); status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "Idempotency-Key") {
		t.Errorf("long key: %v", err)
	}
	if got := goldOf(t, r, r.AdminKey, "demo"); got != gold+2 {
		t.Fatalf("gold: %v, want %v", got, gold+2)
	}

	// Sixteen at once with one key: applied once.
	var wg sync.WaitGroup
	results := make(chan error, 16)
	answers := make(chan *relayv1.IncreaseAttributeResponse, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _, err := call("burst", 7)
			results <- err
			if err == nil {
				answers <- resp
			}
		}()
	}
	wg.Wait()
	close(results)
	close(answers)
	for err := range results {
		if err != nil && (status.Code(err) != codes.AlreadyExists || !strings.Contains(status.Convert(err).Message(), "in progress")) {
			t.Errorf("concurrent keyed write: %v", err)
		}
	}
	var seen *relayv1.IncreaseAttributeResponse
	for a := range answers {
		if seen != nil && !proto.Equal(a, seen) {
			t.Errorf("two answers for one key: %v and %v", seen, a)
		}
		seen = a
	}
	if got := goldOf(t, r, r.AdminKey, "demo"); got != gold+9 {
		t.Fatalf("gold after a burst with one key: %v, want %v", got, gold+9)
	}
}

// TestIdempotencyKeyUpload sends an upload (a client stream) with an
// Idempotency-Key, over REST and gRPC: a retry, which without a key would
// be refused as the file exists, gets the first answer; the key with
// other bytes is refused with 409 and the file keeps the first bytes.
func TestIdempotencyKeyUpload(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	upload := func(name, content string, key *string) relaytest.Response {
		return doKeyed(t, r, http.MethodPost, "/upload", r.AdminKey, key, map[string]any{
			"clientId": "demo", "path": "idem", "filename": name, "fileData": base64.StdEncoding.EncodeToString([]byte(content))})
	}
	first := upload("a.txt", "first bytes", keyOf("upload-1"))
	if first.Status != http.StatusOK {
		t.Fatalf("keyed upload: %d %s", first.Status, first.Body)
	}
	again := upload("a.txt", "first bytes", keyOf("upload-1"))
	if again.Status != http.StatusOK || !bytes.Equal(again.Body, first.Body) || again.Header.Get("Idempotent-Replay") != first.Header.Get("X-Request-Id") {
		t.Fatalf("retried upload: %d %s (replay %q); first %s", again.Status, again.Body, again.Header.Get("Idempotent-Replay"), first.Body)
	}
	if other := upload("a.txt", "other bytes", keyOf("upload-1")); other.Status != http.StatusConflict || !strings.Contains(other.ErrorText(t), "different request") {
		t.Fatalf("the key with other bytes: %d %s", other.Status, other.Body)
	}
	if without := upload("a.txt", "first bytes", nil); without.Status != http.StatusConflict {
		t.Fatalf("the upload again without a key: %d %s", without.Status, without.Body)
	}
	if bad := upload("b.txt", "x", keyOf("é")); bad.Status != http.StatusBadRequest || !strings.Contains(bad.ErrorText(t), "Idempotency-Key") {
		t.Fatalf("a malformed key on an upload: %d %s", bad.Status, bad.Body)
	}
	if got := r.Do(http.MethodGet, "/download", r.AdminKey, relaytest.Q("clientId", "demo", "path", "idem/a.txt"), nil); string(got.Body) != "first bytes" {
		t.Fatalf("the file after a retry and a refused reuse: %d %q", got.Status, got.Body)
	}

	// gRPC, in chunks cut differently on the retry.
	files := relayv1.NewFileServiceClient(r.Conn)
	send := func(key string, chunks ...string) (*relayv1.UploadFileResponse, error) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", r.AdminKey, "idempotency-key", key)
		st, err := files.UploadFile(ctx)
		if err != nil {
			return nil, err
		}
		for i, c := range chunks {
			msg := &relayv1.UploadFileRequest{Chunk: []byte(c)}
			if i == 0 {
				msg.ClientId, msg.Path, msg.Filename = "demo", "idem", "g.txt"
			}
			if err := st.Send(msg); err != nil {
				return nil, err
			}
		}
		return st.CloseAndRecv()
	}
	one, err := send("upload-grpc", "abc", "def")
	if err != nil {
		t.Fatal(err)
	}
	two, err := send("upload-grpc", "ab", "cdef")
	if err != nil || !proto.Equal(one, two) {
		t.Fatalf("retried gRPC upload: %v %v; first %v", two, err, one)
	}
	if _, err := send("upload-grpc", "abc", "deg"); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the key with other bytes over gRPC: %v", err)
	}
}
