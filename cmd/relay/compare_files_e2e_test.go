package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// TestLinkedFilePathRules: every path the embedded world refuses is
// refused with 400 on a linked world too, on every file call and
// transport, before anything is sent to the tabletop; a URL in particular
// never reaches the module, which would fetch it from the game master's
// browser and hand back another server's bytes.
func TestLinkedFilePathRules(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	const secret = "bytes of another server"
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(secret)) }))
	t.Cleanup(other.Close)
	attempts := []string{
		"..",
		"../world.db",
		"maps/../../../../admin.key",
		"/etc/passwd",
		"//etc/passwd",
		"%2e%2e/world.db",
		"%252e%252e%252fadmin.key",
		"..%2f..%2fadmin.key",
		"..\\..\\admin.key",
		"maps\x00",
		strings.Repeat("x", 300),
		other.URL + "/secret",
		"http:" + strings.TrimPrefix(other.URL, "http:/") + "/secret",
		"https://example.invalid/x.png",
		"http%3A%2F%2Fexample.invalid%2Fx",
		"file:///etc/passwd",
	}
	calls := func() uint64 { return tr.Links().Hub().Stats().Calls }
	admin := tr.AdminKey
	gctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", admin)
	files := relayv1.NewFileServiceClient(tr.Conn)
	for _, p := range attempts {
		for _, clientID := range []string{demo.ClientID, linked} {
			before := calls()
			q := relaytest.Q("clientId", clientID, "path", p)
			if resp := tr.Do(http.MethodGet, "/download", admin, q, nil); resp.Status != http.StatusBadRequest || strings.Contains(string(resp.Body), secret) {
				t.Errorf("%s: download %q: %d %.100s", clientID, p, resp.Status, resp.Body)
			}
			if resp := tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("clientId", clientID, "path", p, "recursive", "true"), nil); resp.Status != http.StatusBadRequest {
				t.Errorf("%s: file-system %q: %d %.100s", clientID, p, resp.Status, resp.Body)
			}
			body, ct := multipartBody(t, [][2]string{{"clientId", clientID}, {"path", p}, {"overwrite", "true"}}, "x.txt", []byte("x"))
			if resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct); resp.Status != http.StatusBadRequest {
				t.Errorf("%s: upload into %q: %d %.100s", clientID, p, resp.Status, resp.Body)
			}
			if resp := tr.Do(http.MethodPost, "/upload", admin, nil, map[string]any{"clientId": clientID, "filename": p, "fileData": "aGk=", "overwrite": true}); resp.Status != http.StatusBadRequest {
				t.Errorf("%s: upload as %q: %d %.100s", clientID, p, resp.Status, resp.Body)
			}
			// gRPC: the same rules.
			down, err := files.DownloadFile(gctx, &relayv1.DownloadFileRequest{ClientId: clientID, Path: p})
			if err == nil {
				_, err = down.Recv()
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: gRPC download %q: %v", clientID, p, err)
			}
			if _, err := files.ListFiles(gctx, &relayv1.ListFilesRequest{ClientId: clientID, Path: p}); status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: gRPC listing %q: %v", clientID, p, err)
			}
			up, err := files.UploadFile(gctx)
			if err == nil {
				_ = up.Send(&relayv1.UploadFileRequest{ClientId: clientID, Path: p, Filename: "x.txt", Overwrite: true, Chunk: []byte("x")})
				_, err = up.CloseAndRecv()
			}
			if status.Code(err) != codes.InvalidArgument {
				t.Errorf("%s: gRPC upload into %q: %v", clientID, p, err)
			}
			if n := calls() - before; n != 0 {
				t.Errorf("%s: %q: %d requests reached the tabletop", clientID, p, n)
			}
		}
	}
}

// TestLinkedFileListingDepth: a recursive listing keeps the levels asked
// for on a linked world as on the embedded one, although the module
// itself takes no depth.
func TestLinkedFileListingDepth(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	for _, c := range []struct{ name, path, depth string }{
		{"one level", "", "1"},
		{"two levels", "", "2"},
		{"default", "", ""},
		{"too deep", "", "11"},
	} {
		var answers [2]string
		var statuses [2]int
		for i, clientID := range []string{demo.ClientID, linked} {
			q := relaytest.Q("clientId", clientID, "path", c.path, "recursive", "true")
			if c.depth != "" {
				q.Set("depth", c.depth)
			}
			resp := tr.Do(http.MethodGet, "/file-system", tr.AdminKey, q, nil)
			statuses[i] = resp.Status
			answers[i] = canonicalJSON(t, resp.Body, "size", "modified", "requestId", "clientId")
		}
		if statuses[0] != statuses[1] || answers[0] != answers[1] {
			t.Errorf("%s: embedded %d %s\n linked %d %s", c.name, statuses[0], answers[0], statuses[1], answers[1])
		}
	}
}

// canonicalJSON is body decoded, without the ignored keys (at every depth),
// and encoded again with sorted keys, for comparing two answers.
func canonicalJSON(t *testing.T, body []byte, ignore ...string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("not JSON: %s", body)
	}
	out, _ := json.Marshal(normalise(v, ignore))
	return string(out)
}
