package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"io/fs"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world/demo"
)

// filesDir is the demo world's file area of a test relay.
func (tr *testRelay) filesDir() string {
	return filepath.Join(tr.DataDir, "worlds", "demo", "files")
}

// filesTree lists every path under the data directory with its size, to
// prove that a refused request changed nothing.
func filesTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, "-wal") || strings.HasSuffix(p, "-shm") || strings.HasSuffix(p, ".db") {
			return nil // the databases change with every request (key use)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		size := info.Size()
		if d.IsDir() {
			size = 0
		}
		out = append(out, p+":"+strconv.FormatInt(size, 10))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// multipartBody builds a multipart form: fields in order, then the file.
func multipartBody(t *testing.T, fields [][2]string, fileName string, data []byte) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, f := range fields {
		if err := mw.WriteField(f[0], f[1]); err != nil {
			t.Fatal(err)
		}
	}
	if fileName != "" {
		fw, err := mw.CreateFormFile("file", fileName)
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(data)
	}
	mw.Close()
	return &buf, mw.FormDataContentType()
}

// send sends a request with a ready body and content type.
func (tr *testRelay) send(method, path, key string, query url.Values, body io.Reader, contentType string) relaytest.Response {
	tr.t.Helper()
	u := tr.Base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		tr.t.Fatal(err)
	}
	req.Header.Set("x-api-key", key)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := tr.Client.Do(req)
	if err != nil {
		tr.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		tr.t.Fatal(err)
	}
	return relaytest.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
}

func wantError(t *testing.T, resp relaytest.Response, status int, msg string) {
	t.Helper()
	if resp.Status != status {
		t.Fatalf("status %d, want %d: %s", resp.Status, status, resp.Body)
	}
	if msg != "" && resp.ErrorText(t) != msg {
		t.Fatalf("error %q, want %q", resp.ErrorText(t), msg)
	}
}

func TestFilesListing(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	resp := tr.Do(http.MethodGet, "/file-system", admin, nil, nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	data := resp.Data(t)
	var paths []string
	for _, e := range data["results"].([]any) {
		entry := e.(map[string]any)
		paths = append(paths, entry["type"].(string)+":"+entry["path"].(string))
	}
	if !slices.Equal(paths, []string{"directory:handouts", "directory:maps", "directory:notes", "directory:tokens"}) || data["recursive"] != false || data["path"] != "" {
		t.Fatalf("root listing %v / %s", paths, resp.Body)
	}
	// Recursive, as the trusted user Tess (FILES_BROWSE).
	resp = tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("recursive", "true", "userId", "Tess"), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	results := resp.Data(t)["results"].([]any)
	if len(results) != 4+7 {
		t.Fatalf("recursive listing has %d entries: %s", len(results), resp.Body)
	}
	tavern := results[5].(map[string]any)
	want, _ := fs.ReadFile(demo.Files(), "maps/tavern.svg")
	if tavern["path"] != "maps/tavern.svg" || tavern["name"] != "tavern.svg" || tavern["type"] != "file" || tavern["size"] != float64(len(want)) {
		t.Fatalf("entry %v", tavern)
	}
	if _, err := time.Parse(time.RFC3339, tavern["modified"].(string)); err != nil {
		t.Fatalf("modified: %v", err)
	}
	// A sub-directory; the depth limit.
	resp = tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("path", "tokens", "userId", "tess"), nil)
	if got := len(resp.Data(t)["results"].([]any)); got != 3 {
		t.Fatalf("tokens: %d entries", got)
	}
	wantError(t, tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("recursive", "true", "depth", "50"), nil), 400, "'depth' must be at most 10")
	wantError(t, tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("path", "nowhere"), nil), 404, "Path not found: nowhere")
	// Players have no FILES_BROWSE.
	for _, user := range []string{"Alice", "Bob"} {
		wantError(t, tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("userId", user), nil), 403,
			"User '"+user+"' does not have 'FILES_BROWSE' permission required to browse the file system")
	}
	readOnly, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "ro", Scopes: []string{"entity:read"}})
	wantError(t, tr.Do(http.MethodGet, "/file-system", readOnly, nil, nil), 403, "API key lacks required scope: file:read")
}

func TestFilesDownload(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	want, _ := fs.ReadFile(demo.Files(), "maps/tavern.svg")
	for _, user := range []string{"", "Tess", "Gamemaster"} {
		resp := tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps/tavern.svg", "userId", user), nil)
		if resp.Status != http.StatusOK || !bytes.Equal(resp.Body, want) {
			t.Fatalf("as %q: %d %.200s", user, resp.Status, resp.Body)
		}
		h := resp.Header
		if h.Get("Content-Type") != "image/svg+xml" || h.Get("Content-Length") != strconv.Itoa(len(want)) ||
			h.Get("Content-Disposition") != `attachment; filename=tavern.svg` || !requestIDPattern.MatchString(h.Get("X-Request-Id")) {
			t.Fatalf("headers %v", h)
		}
	}
	// The base64 form.
	resp := tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "handouts/welcome.md", "format", "base64"), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	body := resp.JSON(t)
	data := resp.Data(t)
	md, _ := fs.ReadFile(demo.Files(), "handouts/welcome.md")
	wantURL := "data:text/markdown;charset=utf-8;base64," + base64.StdEncoding.EncodeToString(md)
	if body["type"] != "download-file-result" || !requestIDPattern.MatchString(body["requestId"].(string)) ||
		data["path"] != "handouts/welcome.md" || data["filename"] != "welcome.md" || data["size"] != float64(len(md)) || data["fileData"] != wantURL {
		t.Fatalf("base64 download: %.300s", resp.Body)
	}
	// An empty file.
	if err := os.WriteFile(filepath.Join(tr.filesDir(), "empty.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	resp = tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "empty.txt"), nil)
	if resp.Status != http.StatusOK || len(resp.Body) != 0 || resp.Header.Get("Content-Length") != "0" {
		t.Fatalf("empty: %d %q %v", resp.Status, resp.Body, resp.Header)
	}
	// Failures before the first byte are the usual error bodies.
	wantError(t, tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps/none.png"), nil), 404, "Path not found: maps/none.png")
	wantError(t, tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps"), nil), 400, "Not a file: maps")
	wantError(t, tr.Do(http.MethodGet, "/download", admin, nil, nil), 400, "'path' is required")
	wantError(t, tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps/tavern.svg", "format", "hex"), nil), 400, "'format' must be raw or base64")
	wantError(t, tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps/tavern.svg", "userId", "Alice"), nil), 403,
		"User 'Alice' does not have 'FILES_BROWSE' permission required to download files")
	wantError(t, tr.Do(http.MethodGet, "/download", "", relaytest.Q("path", "maps/tavern.svg"), nil), 401, "API key is required")
	wantError(t, tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "maps/tavern.svg", "userId", "Mallory"), nil), 400, "User not found: Mallory")

	// gRPC: chunks, the first with the metadata.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", admin)
	stream, err := relayv1.NewFileServiceClient(tr.Conn).DownloadFile(ctx, &relayv1.DownloadFileRequest{Path: "maps/tavern.svg"})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil || first.GetFilename() != "tavern.svg" || first.GetMimeType() != "image/svg+xml" || first.GetSize() != float64(len(want)) {
		t.Fatalf("first chunk %v %v", first, err)
	}
	got := first.GetChunk()
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, msg.GetChunk()...)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("gRPC download differs")
	}
}

func TestFilesUpload(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	content := []byte("<svg xmlns='http://www.w3.org/2000/svg'/>")

	// Multipart, as Tess (FILES_UPLOAD), into a new directory.
	body, ct := multipartBody(t, [][2]string{{"path", "uploads/new"}, {"userId", "Tess"}}, "orc.svg", content)
	resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct)
	if resp.Status != http.StatusOK {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	if d := resp.Data(t); d["path"] != "uploads/new/orc.svg" || d["size"] != float64(len(content)) || resp.JSON(t)["type"] != "upload-file-result" {
		t.Fatalf("upload: %s", resp.Body)
	}
	onDisk, _ := os.ReadFile(filepath.Join(tr.filesDir(), "uploads", "new", "orc.svg"))
	if !bytes.Equal(onDisk, content) {
		t.Fatalf("on disk %q", onDisk)
	}
	// It downloads again.
	if resp := tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", "uploads/new/orc.svg"), nil); !bytes.Equal(resp.Body, content) {
		t.Fatalf("download after upload: %s", resp.Body)
	}

	// Overwrite refusal, then overwrite; parameters from the query string.
	body, ct = multipartBody(t, nil, "orc.svg", []byte("v2"))
	wantError(t, tr.send(http.MethodPost, "/upload", admin, relaytest.Q("path", "uploads/new"), body, ct), 409,
		"File already exists: uploads/new/orc.svg. Set overwrite to true to replace it.")
	body, ct = multipartBody(t, [][2]string{{"overwrite", "true"}}, "orc.svg", []byte("v2"))
	if resp := tr.send(http.MethodPost, "/upload", admin, relaytest.Q("path", "uploads/new"), body, ct); resp.Status != http.StatusOK {
		t.Fatalf("overwrite: %d %s", resp.Status, resp.Body)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(tr.filesDir(), "uploads", "new", "orc.svg")); string(onDisk) != "v2" {
		t.Fatalf("after overwrite %q", onDisk)
	}
	// A filename field wins over the part's name.
	body, ct = multipartBody(t, [][2]string{{"filename", "renamed.txt"}}, "ignored.txt", []byte("x"))
	if resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct); resp.Status != http.StatusOK || resp.Data(t)["path"] != "renamed.txt" {
		t.Fatalf("renamed: %d %s", resp.Status, resp.Body)
	}

	// JSON with a data URL, and with plain base64.
	resp = tr.Do(http.MethodPost, "/upload", admin, nil, map[string]any{
		"path": "notes", "filename": "a.txt", "fileData": "data:text/plain;base64," + base64.StdEncoding.EncodeToString([]byte("hello")), "userId": "Tess",
	})
	if resp.Status != http.StatusOK || resp.Data(t)["path"] != "notes/a.txt" || resp.Data(t)["size"] != 5.0 {
		t.Fatalf("data URL: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/upload", admin, relaytest.Q("path", "notes"), map[string]any{"filename": "b.bin", "fileData": base64.StdEncoding.EncodeToString([]byte{0, 1, 2})})
	if resp.Status != http.StatusOK {
		t.Fatalf("base64: %d %s", resp.Status, resp.Body)
	}
	if onDisk, _ := os.ReadFile(filepath.Join(tr.filesDir(), "notes", "b.bin")); !bytes.Equal(onDisk, []byte{0, 1, 2}) {
		t.Fatalf("b.bin %v", onDisk)
	}
	wantError(t, tr.Do(http.MethodPost, "/upload", admin, nil, map[string]any{"path": "notes", "filename": "a.txt", "fileData": "aGk="}), 409, "")

	before := filesTree(t, tr.DataDir)
	// Refused uploads change nothing.
	for _, tt := range []struct {
		name   string
		user   string
		body   any
		status int
		msg    string
	}{
		{"players lack FILES_UPLOAD", "Alice", map[string]any{"filename": "x.txt", "fileData": "aGk="}, 403, "User 'Alice' does not have 'FILES_UPLOAD' permission required to upload files"},
		{"Bob neither", "Bob", map[string]any{"filename": "x.txt", "fileData": "aGk="}, 403, "User 'Bob' does not have 'FILES_UPLOAD' permission required to upload files"},
		{"no file data", "", map[string]any{"filename": "x.txt"}, 400, "Missing file data: send 'fileData' (a data URL or base64) or a multipart form"},
		{"bad base64", "", map[string]any{"filename": "x.txt", "fileData": "!!!"}, 400, ""},
		{"data URL without base64", "", map[string]any{"filename": "x.txt", "fileData": "data:text/plain,hi"}, 400, "Invalid file data format: must be a data URL with base64 content"},
		{"no filename", "", map[string]any{"fileData": "aGk="}, 400, "'filename' is required"},
		{"filename with a path", "", map[string]any{"filename": "a/b.txt", "fileData": "aGk="}, 400, "'filename' must be a name, not a path: a/b.txt"},
		{"wrong type", "", map[string]any{"filename": "x.txt", "fileData": "aGk=", "overwrite": "maybe"}, 400, ""},
		{"not JSON", "", "{nope", 400, "The request body must be a JSON object"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, tr.Do(http.MethodPost, "/upload", admin, relaytest.Q("userId", tt.user), tt.body), tt.status, tt.msg)
		})
	}
	body, ct = multipartBody(t, [][2]string{{"userId", "bob"}}, "x.txt", []byte("x"))
	wantError(t, tr.send(http.MethodPost, "/upload", admin, nil, body, ct), 403, "User 'Bob' does not have 'FILES_UPLOAD' permission required to upload files")
	body, ct = multipartBody(t, [][2]string{{"path", "late"}}, "", nil)
	wantError(t, tr.send(http.MethodPost, "/upload", admin, nil, body, ct), 400, "Missing file: send it as a form part with a file name (for example field 'file')")
	// A field after the file aborts the upload.
	var late bytes.Buffer
	mw := multipart.NewWriter(&late)
	fw, _ := mw.CreateFormFile("file", "late.txt")
	fw.Write([]byte("late"))
	mw.WriteField("path", "elsewhere")
	mw.Close()
	wantError(t, tr.send(http.MethodPost, "/upload", admin, nil, &late, mw.FormDataContentType()), 400, "Form field 'path' must come before the file")
	readOnly, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "ro", Scopes: []string{"file:read"}})
	body, ct = multipartBody(t, nil, "x.txt", []byte("x"))
	wantError(t, tr.send(http.MethodPost, "/upload", readOnly, nil, body, ct), 403, "API key lacks required scope: file:write")
	if after := filesTree(t, tr.DataDir); !slices.Equal(before, after) {
		t.Fatalf("refused uploads changed the data directory:\nbefore %v\nafter  %v", before, after)
	}

	// gRPC: metadata first, then chunks.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", admin)
	up, err := relayv1.NewFileServiceClient(tr.Conn).UploadFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	up.Send(&relayv1.UploadFileRequest{Path: "grpc", Filename: "g.bin", UserId: "Tess"})
	up.Send(&relayv1.UploadFileRequest{Chunk: []byte("abc")})
	up.Send(&relayv1.UploadFileRequest{Chunk: []byte("def")})
	res, err := up.CloseAndRecv()
	if err != nil || res.GetPath() != "grpc/g.bin" || res.GetSize() != 6 {
		t.Fatalf("gRPC upload: %v %v", res, err)
	}
	up, _ = relayv1.NewFileServiceClient(tr.Conn).UploadFile(ctx)
	up.Send(&relayv1.UploadFileRequest{Path: "grpc", Filename: "g.bin"})
	if _, err := up.CloseAndRecv(); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("gRPC overwrite refusal: %v", err)
	}
}

// TestFilesUploadLimit: an upload over --max-upload-bytes is refused with
// 413 while it streams, and leaves nothing.
func TestFilesUploadLimit(t *testing.T) {
	t.Parallel()
	const limit = 256 << 10
	tr := startTestRelay(t, func(c *node.Config) { c.MaxUploadBytes = limit })
	admin := tr.AdminKey
	before := filesTree(t, tr.DataDir)
	msg := "File too large: the upload limit is 262144 bytes"
	body, ct := multipartBody(t, [][2]string{{"path", "big/new"}}, "big.bin", make([]byte, limit+1))
	wantError(t, tr.send(http.MethodPost, "/upload", admin, nil, body, ct), 413, msg)
	// Far over the limit: the relay stops reading early.
	body, ct = multipartBody(t, [][2]string{{"path", "big/new"}}, "big.bin", make([]byte, 4*limit))
	resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct)
	if resp.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("4x: %d %s", resp.Status, resp.Body)
	}
	encoded := base64.StdEncoding.EncodeToString(make([]byte, limit+1))
	wantError(t, tr.Do(http.MethodPost, "/upload", admin, nil, map[string]any{"filename": "big.bin", "fileData": encoded}), 413, msg)
	if after := filesTree(t, tr.DataDir); !slices.Equal(before, after) {
		t.Fatalf("over-size uploads left files:\nbefore %v\nafter  %v", before, after)
	}
	// Exactly at the limit is fine.
	body, ct = multipartBody(t, nil, "ok.bin", make([]byte, limit))
	if resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct); resp.Status != http.StatusOK {
		t.Fatalf("at the limit: %d %s", resp.Status, resp.Body)
	}
}

// TestFilesTraversal: every attempt to reach outside the file area fails
// with 400, on every endpoint, and leaves nothing behind.
func TestFilesTraversal(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	// Links that point out of the area: to the admin key, to the data directory.
	if err := os.Symlink("../../../admin.key", filepath.Join(tr.filesDir(), "key-link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(tr.DataDir, filepath.Join(tr.filesDir(), "data-link")); err != nil {
		t.Fatal(err)
	}
	attempts := []string{
		"..",
		"../world.db",
		"../../../admin.key",
		"maps/../../../../admin.key",
		"/etc/passwd",
		"//etc/passwd",
		"%2e%2e/world.db",
		"%2E%2E%2F%2E%2E%2Fadmin.key",
		"%252e%252e%252fadmin.key",
		"..%2f..%2f..%2fadmin.key",
		"..\\..\\admin.key",
		"maps/tavern.svg\x00.png",
		"maps\x00",
		strings.Repeat("x", 300),
		strings.Repeat("deep/", 300),
		"key-link",
		"data-link",
		"data-link/admin.key",
		"data-link/worlds/demo/world.db",
	}
	before := filesTree(t, tr.DataDir)
	for _, p := range attempts {
		if resp := tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", p), nil); resp.Status != http.StatusBadRequest {
			t.Errorf("download %q: %d %.100s", p, resp.Status, resp.Body)
		}
		if resp := tr.Do(http.MethodGet, "/download", admin, relaytest.Q("path", p, "format", "base64"), nil); resp.Status != http.StatusBadRequest {
			t.Errorf("download base64 %q: %d %.100s", p, resp.Status, resp.Body)
		}
		if resp := tr.Do(http.MethodGet, "/file-system", admin, relaytest.Q("path", p, "recursive", "true"), nil); resp.Status != http.StatusBadRequest {
			t.Errorf("file-system %q: %d %.100s", p, resp.Status, resp.Body)
		}
		body, ct := multipartBody(t, [][2]string{{"path", p}, {"overwrite", "true"}}, "x.txt", []byte("x"))
		if resp := tr.send(http.MethodPost, "/upload", admin, nil, body, ct); resp.Status != http.StatusBadRequest {
			t.Errorf("upload into %q: %d %.100s", p, resp.Status, resp.Body)
		}
		if resp := tr.Do(http.MethodPost, "/upload", admin, nil, map[string]any{"filename": p, "fileData": "aGk=", "overwrite": true}); resp.Status != http.StatusBadRequest {
			t.Errorf("upload as %q: %d %.100s", p, resp.Status, resp.Body)
		}
	}
	if after := filesTree(t, tr.DataDir); !slices.Equal(before, after) {
		t.Fatalf("traversal attempts changed the data directory:\nbefore %v\nafter  %v", before, after)
	}
	key, _ := os.ReadFile(filepath.Join(tr.DataDir, "admin.key"))
	if strings.TrimSpace(string(key)) != admin {
		t.Fatal("admin.key changed")
	}
	// The listing leaves the outward links out.
	resp := tr.Do(http.MethodGet, "/file-system", admin, nil, nil)
	if strings.Contains(string(resp.Body), "link") {
		t.Fatalf("listing shows outward links: %s", resp.Body)
	}
}

// TestFilesLargeDownloadStreams downloads a 100 MiB file and checks that
// the process's heap grows by far less than the file: the file is streamed,
// never loaded whole. It runs alone (not parallel) so other tests do not
// blur the measurement.
func TestFilesLargeDownloadStreams(t *testing.T) {
	tr := startTestRelay(t)
	const size = 100 << 20
	f, err := os.Create(filepath.Join(tr.filesDir(), "big.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil { // sparse: quick to make, reads as zeros
		t.Fatal(err)
	}
	f.Close()

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	req, _ := http.NewRequest(http.MethodGet, tr.Base+"/download?path=big.bin", nil)
	req.Header.Set("x-api-key", tr.AdminKey)
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	close(stop)
	wg.Wait()
	if err != nil || n != size || resp.Header.Get("Content-Length") != strconv.Itoa(size) {
		t.Fatalf("downloaded %d bytes (%v), Content-Length %s", n, err, resp.Header.Get("Content-Length"))
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap in use grew by at most %.1f MiB while downloading %d MiB", float64(growth)/(1<<20), size>>20)
	// Measured: about 29 MiB whatever the file's size (the same for 400
	// MiB): gRPC's flow-control windows between the gateway and the server
	// (about 12 MiB live) plus chunks not yet collected. A relay loading
	// the file would grow by more than the file.
	if growth > size*2/5 {
		t.Fatalf("heap grew by %d MiB for a %d MiB download", growth>>20, size>>20)
	}
}
