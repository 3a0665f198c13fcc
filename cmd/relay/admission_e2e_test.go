package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world/demo"
)

// hugeBody is the Content-Length the admission tests announce and never
// send: a relay that read bodies before keys would wait for it.
const hugeBody = 100 << 20

// rawResponse sends a request's head with a Content-Length of hugeBody and
// no body, and returns the response, which must come within a second. The
// connection is closed when the test ends.
func rawResponse(t *testing.T, addr, method, target string, header http.Header) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", method, target, addr, hugeBody)
	for k, vs := range header {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString("\r\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: no answer before the body: %v", method, target, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	return resp
}

// revokedKey creates a key and revokes it.
func (tr *testRelay) revokedKey(t *testing.T) string {
	t.Helper()
	key, id := tr.NewKey(&relayv1.CreateKeyRequest{Name: "revoked", Scopes: []string{"all"}})
	if _, err := tr.Keys().Revoke(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return key
}

// TestAdmissionBeforeBody sends every REST route, with no key, a malformed
// key, an unknown key and a revoked key, the head of a 100 MiB request and
// no body: each must be answered 401 at once, with the connection closed,
// instead of waiting for a body the relay should never read.
func TestAdmissionBeforeBody(t *testing.T) {
	tr := startTestRelay(t)
	credentials := map[string]string{
		"no key":        "",
		"malformed key": "not-a-key",
		"unknown key":   "rk_" + strings.Repeat("A", 43),
		"revoked key":   tr.revokedKey(t),
	}
	endpoints := restEndpoints(t)
	for _, ep := range endpoints {
		for name, key := range credentials {
			header := http.Header{"Content-Type": {"application/json"}}
			if ep.path == "/upload" {
				header.Set("Content-Type", "multipart/form-data; boundary=x")
			}
			if key != "" {
				header.Set("X-Api-Key", key)
			}
			resp := rawResponse(t, tr.Addr(), ep.method, ep.path+"?clientId=demo", header)
			if resp.StatusCode != http.StatusUnauthorized {
				body, _ := io.ReadAll(resp.Body)
				t.Errorf("%s with %s: status %d, want 401: %s", ep, name, resp.StatusCode, body)
				continue
			}
			if !resp.Close {
				t.Errorf("%s with %s: the connection stays open with an unread body", ep, name)
			}
		}
	}
	// A browser's stream ticket is checked the same way on the event
	// streams.
	resp := rawResponse(t, tr.Addr(), http.MethodGet, "/hooks/subscribe?ticket=st_forged", nil)
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("event stream with a forged ticket: status %d, want 401", resp.StatusCode)
	}
	// Public routes need no key.
	if r := tr.Do(http.MethodGet, "/healthz", "", nil, nil); r.Status != http.StatusOK {
		t.Errorf("/healthz without a key: %d", r.Status)
	}
	t.Logf("%d REST routes refused before their bodies, four ways each", len(endpoints))
}

// TestAdmissionBeforeBodyGRPC calls every gRPC method of the contract with a
// request message that never comes (an open HTTP/2 stream with no data):
// without a valid key each is refused with Unauthenticated at once, before
// the relay waits for the message.
func TestAdmissionBeforeBodyGRPC(t *testing.T) {
	tr := startTestRelay(t)
	services, err := server.ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	client := h2cClient()
	revoked := tr.revokedKey(t)
	count := 0
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			method := fmt.Sprintf("/%s/%s", sd.FullName(), md.Name())
			for _, key := range []string{"", "rk_bogus", revoked} {
				code := grpcWithoutMessage(t, client, tr.Addr(), method, key)
				if code != codes.Unauthenticated {
					t.Errorf("%s with key %q: %v, want Unauthenticated", method, key, code)
				}
				count++
			}
		}
	}
	// The health service stays public.
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check refused without a key: %v", err)
	}
	t.Logf("%d gRPC calls refused before their messages", count)
}

// grpcWithoutMessage opens a gRPC call and sends nothing after its
// headers; it returns the status the relay answers within a second.
func grpcWithoutMessage(t *testing.T, client *http.Client, addr, method, key string) codes.Code {
	t.Helper()
	body, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+method, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	if key != "" {
		req.Header.Set("X-Api-Key", key)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: no answer before the message: %v", method, err)
	}
	defer resp.Body.Close()
	value := resp.Header.Get("Grpc-Status")
	if value == "" {
		// A status in the trailers means the server read a message.
		_, _ = io.Copy(io.Discard, resp.Body)
		value = resp.Trailer.Get("Grpc-Status")
	}
	n, err := strconv.Atoi(value)
	if err != nil {
		t.Fatalf("%s: no grpc-status in %v", method, resp.Header)
	}
	return codes.Code(n)
}

// TestAuthFailureLimit: failed authentications from one address are counted
// across REST and gRPC; past the limit they get 429 with Retry-After, while
// a valid key from the same address keeps working.
func TestAuthFailureLimit(t *testing.T) {
	tr := startTestRelay(t, func(c *node.Config) { c.AuthFailureLimit = 4 })
	for i := range 3 {
		if r := tr.Do(http.MethodGet, "/get", "rk_bogus", relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusUnauthorized {
			t.Fatalf("failure %d: status %d, want 401", i+1, r.Status)
		}
	}
	// The fourth failure comes over gRPC.
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "rk_bogus")
	docs := relayv1.NewDocumentServiceClient(conn)
	if _, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("fourth failure over gRPC: %v, want Unauthenticated", err)
	}
	r := tr.Do(http.MethodGet, "/get", "", relaytest.Q("uuid", relaytest.AriaUUID), nil)
	if r.Status != http.StatusTooManyRequests || r.Header.Get("Retry-After") == "" {
		t.Fatalf("fifth failure: status %d, Retry-After %q; want 429 with Retry-After: %s", r.Status, r.Header.Get("Retry-After"), r.Body)
	}
	if !strings.Contains(r.ErrorText(t), "failed authentications") {
		t.Errorf("429 text: %q", r.ErrorText(t))
	}
	if _, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("failure over gRPC past the limit: %v, want ResourceExhausted", err)
	}
	// A valid key is never held back by its address's failures.
	if r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
		t.Errorf("valid key after the failures: status %d", r.Status)
	}
	good := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	if _, err := docs.GetDocument(good, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID}); err != nil {
		t.Errorf("valid key over gRPC after the failures: %v", err)
	}
}

// TestStatusOrder: whatever else is wrong with a call, a bad key is 401,
// then an unknown world is 404 (the same text on every route), and only
// then a bad parameter is 400, on plain routes, event streams, downloads
// and both kinds of upload.
func TestStatusOrder(t *testing.T) {
	tr := startTestRelay(t)
	key := tr.AdminKey
	unknown := tr.Do(http.MethodGet, "/get", key, relaytest.Q("clientId", "nowhere", "uuid", relaytest.AriaUUID), nil)
	if unknown.Status != http.StatusNotFound {
		t.Fatalf("unknown world: %d %s", unknown.Status, unknown.Body)
	}
	notFound := unknown.ErrorText(t)

	multipart := func(fields string) (string, string) {
		body := "--b\r\nContent-Disposition: form-data; name=\"overwrite\"\r\n\r\n" + fields + "\r\n" +
			"--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\r\nhello\r\n--b--\r\n"
		return body, "multipart/form-data; boundary=b"
	}
	mpBody, mpType := multipart("maybe")
	cases := []struct {
		name        string
		method      string
		path        string
		query       url.Values
		body        string
		contentType string
	}{
		{"get with a bad array", http.MethodGet, "/dnd5e/get-actor-details", relaytest.Q("actorUuid", relaytest.AriaUUID, "details", "[1,"), "", ""},
		{"update with a bad body", http.MethodPut, "/update", nil, `{"uuid":1`, "application/json"},
		{"update with a wrong type", http.MethodPut, "/update", nil, `{"uuid":5,"data":{}}`, "application/json"},
		{"short rest with a wrong type", http.MethodPost, "/dnd5e/short-rest", relaytest.Q("actorUuid", relaytest.AriaUUID), `{"autoHD":"x"}`, "application/json"},
		{"event stream with a bad parameter", http.MethodGet, "/hooks/subscribe", relaytest.Q("lastEventId", "x"), "", ""},
		{"download with a bad format", http.MethodGet, "/download", relaytest.Q("path", "a.txt", "format", "zip"), "", ""},
		{"JSON upload without data", http.MethodPost, "/upload", nil, `{"filename":"a.txt","path":"x"}`, "application/json"},
		{"JSON upload that is not an object", http.MethodPost, "/upload", nil, `[1]`, "application/json"},
		{"multipart upload with a bad field", http.MethodPost, "/upload", nil, mpBody, mpType},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			send := func(key, clientID string) relaytest.Response {
				query := url.Values{}
				for k, v := range c.query {
					query[k] = v
				}
				query.Set("clientId", clientID)
				var body io.Reader
				if c.body != "" {
					body = strings.NewReader(c.body)
				}
				return tr.send(c.method, c.path, key, query, body, c.contentType)
			}
			if r := send("rk_bogus", "nowhere"); r.Status != http.StatusUnauthorized {
				t.Errorf("bad key: %d, want 401: %s", r.Status, r.Body)
			}
			r := send(key, "nowhere")
			if r.Status != http.StatusNotFound || r.ErrorText(t) != notFound {
				t.Errorf("unknown world: %d %q, want 404 %q", r.Status, r.Body, notFound)
			}
			if r := send(key, demo.ClientID); r.Status != http.StatusBadRequest {
				t.Errorf("known world: %d, want 400: %s", r.Status, r.Body)
			}
		})
	}
}

// TestUploadJSONStreaming covers the two ways a JSON upload is decoded as it
// arrives: straight to the file area when the file name comes before the
// data, through the spool when it comes after; and that a refused upload,
// either way, leaves nothing in the file area or the spool.
func TestUploadJSONStreaming(t *testing.T) {
	const limit = 256 << 10
	tr := startTestRelay(t, func(c *node.Config) { c.MaxUploadBytes = limit })
	admin := tr.AdminKey
	post := func(body string) relaytest.Response {
		return tr.send(http.MethodPost, "/upload", admin, nil, strings.NewReader(body), "application/json")
	}
	content := strings.Repeat("relay ", 20000) // 120,000 bytes: several chunks
	encoded := base64.StdEncoding.EncodeToString([]byte(content))

	// Name first: streamed straight through. JSON escapes in the data URL
	// are decoded.
	r := post(`{"path":"direct","filename":"a.txt","fileData":"data:text\/plain;base64,` + encoded + `","note":{"x":[1,2]}}`)
	if r.Status != http.StatusOK || r.Data(t)["path"] != "direct/a.txt" || r.Data(t)["size"] != float64(len(content)) {
		t.Fatalf("direct: %d %s", r.Status, r.Body)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(tr.filesDir(), "direct", "a.txt")); string(onDisk) != content {
		t.Fatalf("direct upload stored %d bytes", len(onDisk))
	}
	// Data first: spooled, then sent with the parameters that followed.
	r = post(`{"fileData":"` + encoded + `","filename":"b.txt","path":"spooled","overwrite":false}`)
	if r.Status != http.StatusOK || r.Data(t)["path"] != "spooled/b.txt" {
		t.Fatalf("spooled: %d %s", r.Status, r.Body)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(tr.filesDir(), "spooled", "b.txt")); string(onDisk) != content {
		t.Fatalf("spooled upload stored %d bytes", len(onDisk))
	}

	before := filesTree(t, tr.DataDir)
	half := len(encoded) / 2
	corrupt := encoded[:half] + "!!!!" + encoded[half:]
	huge := base64.StdEncoding.EncodeToString(make([]byte, limit+1))
	for _, c := range []struct {
		name, body string
		status     int
		msg        string
	}{
		{"direct, a parameter after the data", `{"filename":"c.txt","fileData":"` + encoded + `","path":"elsewhere"}`, 400,
			"Parameter 'path' must come before 'fileData' when 'filename' does (or go in the query string)"},
		{"direct, corrupt base64 half way", `{"filename":"c.txt","fileData":"` + corrupt + `"}`, 400, ""},
		{"spooled, corrupt base64 half way", `{"fileData":"` + corrupt + `","filename":"c.txt"}`, 400, ""},
		{"direct, over the limit", `{"filename":"c.txt","fileData":"` + huge + `"}`, 413, ""},
		{"spooled, over the limit", `{"fileData":"` + huge + `","filename":"c.txt"}`, 413, ""},
		{"spooled, cut short", `{"fileData":"` + encoded + `","filename":"c.t`, 400, "The request body must be a JSON object"},
		{"data twice", `{"fileData":"aGk=","fileData":"aGk=","filename":"c.txt"}`, 400, "'fileData' appears twice"},
		{"data that is not a string", `{"filename":"c.txt","fileData":12}`, 400, "'fileData' must be a string"},
		{"null data", `{"filename":"c.txt","fileData":null}`, 400, "Missing file data: send 'fileData' (a data URL or base64) or a multipart form"},
		{"an oversized unknown member", `{"filename":"c.txt","junk":"` + strings.Repeat("x", 70<<10) + `","fileData":"aGk="}`, 400, "Parameter 'junk' is too long"},
		{"spooled, no file name", `{"fileData":"aGk="}`, 400, "'filename' is required"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantError(t, post(c.body), c.status, c.msg)
		})
	}
	if after := filesTree(t, tr.DataDir); !slices.Equal(before, after) {
		t.Fatalf("refused uploads left files:\nbefore %v\nafter  %v", before, after)
	}
	if spooled, _ := os.ReadDir(filepath.Join(tr.DataDir, "spool")); len(spooled) != 0 {
		t.Fatalf("the spool keeps %d files", len(spooled))
	}
}
