package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/wire"
)

// The size and shape limits of issue 12, section 6, over REST and over
// gRPC (h2c on the relay's port, as an outside client connects): one
// request size limit for both, a document size limit, a nesting depth
// limit and refused keys on every value that reaches a world, dice
// formulas refused past their limits, and error messages that never show
// the server's paths.

// grpcClient dials the relay's port over h2c, as an outside gRPC client,
// and returns a context carrying the admin key.
func (tr *testRelay) grpcClient(t *testing.T) (*grpc.ClientConn, context.Context) {
	t.Helper()
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, metadata.AppendToOutgoingContext(t.Context(), "x-api-key", tr.AdminKey)
}

// getDoc reads a document over REST with the admin key.
func (tr *testRelay) getDoc(t *testing.T, uuid string) map[string]any {
	t.Helper()
	resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", uuid), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("get %s: %d %s", uuid, resp.Status, resp.Body)
	}
	return resp.Data(t)
}

// unchanged fails the test when a document differs from before.
func (tr *testRelay) unchanged(t *testing.T, uuid string, before map[string]any, after string) {
	t.Helper()
	if now := tr.getDoc(t, uuid); !reflect.DeepEqual(now, before) {
		t.Fatalf("%s changed after %s", uuid, after)
	}
}

// wantTooLarge checks a gRPC error: ResourceExhausted with the TOO_LARGE
// reason (413 over REST) and a message holding want.
func wantTooLarge(t *testing.T, what string, err error, want string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), want) {
		t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED %q", what, err, want)
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetReason() == wire.ReasonTooLarge {
			return
		}
	}
	t.Fatalf("%s: %v carries no TOO_LARGE reason", what, err)
}

// wantGRPCTooLarge checks the refusal of a gRPC message over the request
// size limit: grpc-go's own ResourceExhausted, which names the limit and
// is sent before the relay's handlers run (server/decode.go), without the
// rate limit's reason and retry delay.
func wantGRPCTooLarge(t *testing.T, what string, err error, limit int) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "larger than max") ||
		!strings.Contains(st.Message(), fmt.Sprintf(" vs. %d)", limit)) {
		t.Fatalf("%s: %v, want RESOURCE_EXHAUSTED naming the limit %d", what, err, limit)
	}
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			if d.GetReason() == wire.ReasonRateLimited {
				t.Fatalf("%s: %v looks like a rate limit", what, err)
			}
		case *errdetails.RetryInfo:
			t.Fatalf("%s: %v asks to retry", what, err)
		}
	}
}

// wantInvalid checks a gRPC error: InvalidArgument with a message holding
// want.
func wantInvalid(t *testing.T, what string, err error, want string) {
	t.Helper()
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), want) {
		t.Fatalf("%s: %v, want INVALID_ARGUMENT %q", what, err, want)
	}
}

// wantREST checks a REST answer's status and that its error names want.
func wantREST(t *testing.T, what string, resp relaytest.Response, code int, want string) {
	t.Helper()
	if resp.Status != code || !strings.Contains(resp.ErrorText(t), want) {
		t.Fatalf("%s: %d %.400s, want %d naming %q", what, resp.Status, resp.Body, code, want)
	}
}

// mustStruct builds a google.protobuf.Struct.
func mustStruct(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// nestedJSON is a JSON object nested levels deep: {"a":{"a":...1}}.
func nestedJSON(levels int) string {
	return strings.Repeat(`{"a":`, levels) + "1" + strings.Repeat("}", levels)
}

// nestedValue is nestedJSON as a Go value.
func nestedValue(levels int) any {
	var v any = 1.0
	for range levels {
		v = map[string]any{"a": v}
	}
	return v
}

// TestRequestSizeLimitSameOnEveryTransport: one limit (--max-body-bytes,
// 64 KiB in the harness) for a REST body and a gRPC message, with 413 and
// RESOURCE_EXHAUSTED naming it; nothing changes.
// Uploads, whose chunks are gRPC messages, keep working beyond it.
func TestRequestSizeLimitSameOnEveryTransport(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn, ctx := tr.grpcClient(t)
	docs := relayv1.NewDocumentServiceClient(conn)
	before := tr.getDoc(t, relaytest.AriaUUID)
	big := strings.Repeat("x", 100<<10)

	resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.big": big}})
	wantREST(t, "REST update over the limit", resp, http.StatusRequestEntityTooLarge, "Request body too large: the limit is 65536 bytes")
	_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags.big": big})})
	wantGRPCTooLarge(t, "gRPC update over the limit", err, 65536)
	_, err = docs.CreateDocument(ctx, &relayv1.CreateDocumentRequest{EntityType: "Actor", Data: mustStruct(t, map[string]any{"name": "Big", "type": "npc", "flags": map[string]any{"big": big}})})
	wantGRPCTooLarge(t, "gRPC create over the limit", err, 65536)
	// 3 MiB, the size that got through before, and a message far past any
	// default (the prefix is read, the message is not).
	for _, n := range []int{3 << 20, 40 << 20} {
		_, err = relayv1.NewScriptServiceClient(conn).ExecuteJs(ctx, &relayv1.ExecuteJsRequest{Script: strings.Repeat(" ", n)})
		wantGRPCTooLarge(t, fmt.Sprintf("gRPC script of %d bytes", n), err, 65536)
	}
	tr.unchanged(t, relaytest.AriaUUID, before, "refused oversized requests")

	// Within the limit, both transports write.
	fits := strings.Repeat("y", 60<<10)
	if _, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags.fits": fits})}); err != nil {
		t.Fatalf("gRPC update within the limit: %v", err)
	}
	resp = tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.fits2": fits}})
	if resp.Status != http.StatusOK {
		t.Fatalf("REST update within the limit: %d %.300s", resp.Status, resp.Body)
	}

	// An upload is not bounded by the request limit: over REST the gateway
	// sends it in chunks that fit; a gRPC client does the same.
	file := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB
	body, ct := multipartBody(t, [][2]string{{"path", "limits"}}, "rest.bin", file)
	if resp := tr.send(http.MethodPost, "/upload", tr.AdminKey, nil, body, ct); resp.Status != http.StatusOK {
		t.Fatalf("REST upload of 320 KiB: %d %s", resp.Status, resp.Body)
	}
	upload := func(name string, chunk int) error {
		stream, err := relayv1.NewFileServiceClient(conn).UploadFile(ctx)
		if err != nil {
			return err
		}
		if err := stream.Send(&relayv1.UploadFileRequest{Path: "limits", Filename: name}); err != nil {
			_, err = stream.CloseAndRecv()
			return err
		}
		for rest := file; len(rest) > 0; rest = rest[min(chunk, len(rest)):] {
			if err := stream.Send(&relayv1.UploadFileRequest{Chunk: rest[:min(chunk, len(rest))]}); err != nil {
				break // the server ended the call: its status comes with the answer
			}
		}
		_, err = stream.CloseAndRecv()
		return err
	}
	if err := upload("grpc.bin", 32<<10); err != nil {
		t.Fatalf("gRPC upload in 32 KiB chunks: %v", err)
	}
	for _, name := range []string{"rest.bin", "grpc.bin"} {
		if got, err := os.ReadFile(filepath.Join(tr.filesDir(), "limits", name)); err != nil || !bytes.Equal(got, file) {
			t.Fatalf("%s: %d bytes, %v", name, len(got), err)
		}
	}
	// A chunk over the limit is refused like any other message.
	if err := upload("huge-chunk.bin", 100<<10); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("gRPC upload chunk over the limit: %v", err)
	}
	if _, err := os.Stat(filepath.Join(tr.filesDir(), "limits", "huge-chunk.bin")); err == nil {
		t.Fatal("the refused upload left a file")
	}
}

// TestDocumentSizeLimitEveryEntry: a write that would make a document
// larger than --max-document-bytes is refused with 413 naming the limit,
// whichever door it comes through, and changes nothing: no document, no
// event.
func TestDocumentSizeLimitEveryEntry(t *testing.T) {
	t.Parallel()
	const limit = 48 << 10 // Aria is about 34 KB
	tr := startTestRelay(t, func(c *node.Config) { c.MaxDocumentBytes = limit; c.MaxBodyBytes = 1 << 20 })
	conn, ctx := tr.grpcClient(t)
	docs := relayv1.NewDocumentServiceClient(conn)
	stream := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	stream.expect("connected")
	before := tr.getDoc(t, relaytest.AriaUUID)
	pad := strings.Repeat("x", 20<<10)
	want := fmt.Sprintf("over the document size limit of %d bytes", limit)

	resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"flags.pad": pad}})
	wantREST(t, "REST update", resp, http.StatusRequestEntityTooLarge, relaytest.AriaUUID+" would be ")
	wantREST(t, "REST update", resp, http.StatusRequestEntityTooLarge, want)
	_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags.pad": pad})})
	wantTooLarge(t, "gRPC update", err, want)
	// An embedded document grows its parent.
	resp = tr.Do(http.MethodPost, "/create", tr.AdminKey, nil, map[string]any{"entityType": "Item", "parentUuid": relaytest.AriaUUID, "data": map[string]any{"name": "Tome", "system": map[string]any{"description": pad}}})
	wantREST(t, "REST create of an item", resp, http.StatusRequestEntityTooLarge, want)
	_, err = docs.CreateDocument(ctx, &relayv1.CreateDocumentRequest{EntityType: "Item", ParentUuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"name": "Tome", "system": map[string]any{"description": pad}})})
	wantTooLarge(t, "gRPC create of an item", err, want)
	// A new document on its own.
	huge := strings.Repeat("z", limit)
	resp = tr.Do(http.MethodPost, "/create", tr.AdminKey, nil, map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Huge", "type": "npc", "flags": map[string]any{"pad": huge}}})
	wantREST(t, "REST create of an actor", resp, http.StatusRequestEntityTooLarge, want)
	// A script's write: the world's error reaches the script, which may
	// catch it; uncaught, it is the call's error.
	resp = tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `await game.update("` + relaytest.AriaUUID + `", {"flags.pad": "x".repeat(20480)})`})
	if resp.Status == http.StatusOK || !strings.Contains(resp.ErrorText(t), want) {
		t.Fatalf("script write: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `try { await game.update("` + relaytest.AriaUUID + `", {"flags.pad": "x".repeat(20480)}) } catch (e) { return e.kind + ": " + e.message }`})
	if resp.Status != http.StatusOK || !strings.Contains(fmt.Sprint(resp.Data(t)["result"]), "too large: ") {
		t.Fatalf("script catching the refusal: %d %s", resp.Status, resp.Body)
	}
	tr.unchanged(t, relaytest.AriaUUID, before, "refused writes")
	if n := len(tr.getDocs(t, "Huge")); n != 0 {
		t.Fatalf("the refused actor exists %d times", n)
	}

	// The first event the stream sees is that of the next write that fits.
	tr.setHP(relaytest.AriaUUID, 7)
	if f := stream.next(5 * time.Second); !strings.Contains(f.data, `"value":7`) || strings.Contains(f.data, "pad") {
		t.Fatalf("first event after the refused writes: %s %s", f.event, f.data)
	}
}

// getDocs searches documents by name with the admin key.
func (tr *testRelay) getDocs(t *testing.T, name string) []any {
	t.Helper()
	resp := tr.Do(http.MethodGet, "/search", tr.AdminKey, relaytest.Q("query", name), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("search %s: %d %s", name, resp.Status, resp.Body)
	}
	results, _ := resp.Data(t)["results"].([]any)
	var out []any
	for _, r := range results {
		if m, _ := r.(map[string]any); m["name"] == name {
			out = append(out, r)
		}
	}
	return out
}

// TestJSONDepthLimitEveryEntry: values nested past --max-json-depth are
// refused with 400 naming the limit and the parameter, over REST and
// gRPC, for updates (dotted keys counted), creations, token matches and
// scripts; values at the limit are stored. Nesting past what a decoder
// takes is refused as bad input too, never an internal error.
func TestJSONDepthLimitEveryEntry(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.MaxBodyBytes = 1 << 20 })
	conn, ctx := tr.grpcClient(t)
	docs := relayv1.NewDocumentServiceClient(conn)
	before := tr.getDoc(t, relaytest.AriaUUID)
	const want = "nests deeper than the limit of 64 levels"

	body := `{"uuid":"` + relaytest.AriaUUID + `","data":{"flags":` + nestedJSON(64) + `}}`
	wantREST(t, "REST update 65 levels deep", tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, body), http.StatusBadRequest, "'data' "+want+" (at data.flags.a.a.a")
	for _, n := range []int{5000, 9000} {
		body := `{"uuid":"` + relaytest.AriaUUID + `","data":{"flags":` + nestedJSON(n) + `}}`
		wantREST(t, fmt.Sprintf("REST update %d levels deep", n), tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, body), http.StatusBadRequest, want)
	}
	body = `{"uuid":"` + relaytest.AriaUUID + `","data":{"flags":` + nestedJSON(20000) + `}}`
	wantREST(t, "REST update 20,000 levels deep", tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, body), http.StatusBadRequest, "The request body nests deeper than 10000 levels")
	dotted := map[string]any{"flags" + strings.Repeat(".b", 64): 1}
	wantREST(t, "REST dotted keys", tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"uuid": relaytest.AriaUUID, "data": dotted}), http.StatusBadRequest, want+" once its dotted keys are expanded")
	wantREST(t, "REST create", tr.Do(http.MethodPost, "/create", tr.AdminKey, nil, map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Deep", "type": "npc", "flags": nestedValue(64)}}), http.StatusBadRequest, want)
	wantREST(t, "REST select", tr.Do(http.MethodPost, "/select", tr.AdminKey, nil, map[string]any{"data": map[string]any{"actor.flags": nestedValue(64)}}), http.StatusBadRequest, want)
	resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `let v = 1; for (let i = 0; i < 100; i++) v = {a: v}; await game.update("` + relaytest.AriaUUID + `", {flags: v})`})
	wantREST(t, "script", resp, http.StatusBadRequest, want)

	_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags": nestedValue(64)})})
	wantInvalid(t, "gRPC update", err, "'data' "+want)
	_, err = docs.CreateDocument(ctx, &relayv1.CreateDocumentRequest{EntityType: "Actor", Data: mustStruct(t, map[string]any{"name": "Deep", "type": "npc", "flags": nestedValue(64)})})
	wantInvalid(t, "gRPC create", err, want)
	_, err = relayv1.NewCanvasServiceClient(conn).SelectTokens(ctx, &relayv1.SelectTokensRequest{Data: mustStruct(t, map[string]any{"actor.flags": nestedValue(64)})})
	wantInvalid(t, "gRPC select", err, want)
	// Past protobuf's own recursion limit the message cannot be decoded:
	// still the caller's fault, not the server's.
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags": nestedValue(6000)})})
	wantInvalid(t, "gRPC update 6,000 levels deep", err, "The request message nests too deeply to be read")
	tr.unchanged(t, relaytest.AriaUUID, before, "refused deep values")
	if n := len(tr.getDocs(t, "Deep")); n != 0 {
		t.Fatalf("a refused actor exists %d times", n)
	}

	// At the limit: the data object is level 1.
	if _, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"flags": nestedValue(63)})}); err != nil {
		t.Fatalf("gRPC update at the limit: %v", err)
	}
	body = `{"uuid":"` + relaytest.AriaUUID + `","data":{"flags":{"rest":` + nestedJSON(62) + `}}}`
	if resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, body); resp.Status != http.StatusOK {
		t.Fatalf("REST update at the limit: %d %.300s", resp.Status, resp.Body)
	}
}

// TestRefusedKeysEveryEntry: keys named __proto__, constructor or
// prototype (or with such a dotted part) are refused with 400 wherever a
// value reaches a world, so no document ever hands them to a JavaScript
// client; the same words inside other keys are plain data.
func TestRefusedKeysEveryEntry(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn, ctx := tr.grpcClient(t)
	docs := relayv1.NewDocumentServiceClient(conn)
	before := tr.getDoc(t, relaytest.AriaUUID)
	const want = "keys named __proto__, constructor and prototype are refused"

	for _, body := range []string{
		`{"uuid":"` + relaytest.AriaUUID + `","data":{"__proto__":{"isGM":true}}}`,
		`{"uuid":"` + relaytest.AriaUUID + `","data":{"flags":{"x":[{"constructor":{"prototype":{"polluted":1}}}]}}}`,
		`{"uuid":"` + relaytest.AriaUUID + `","data":{"flags.__proto__.polluted":1}}`,
		`{"uuid":"` + relaytest.AriaUUID + `","data":{"constructor.prototype.polluted":1}}`,
	} {
		wantREST(t, "REST update "+body, tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, body), http.StatusBadRequest, want)
	}
	wantREST(t, "REST create", tr.Do(http.MethodPost, "/create", tr.AdminKey, nil, `{"entityType":"Actor","data":{"name":"Proto","type":"npc","__proto__":{"x":1}}}`), http.StatusBadRequest, want)
	wantREST(t, "REST select", tr.Do(http.MethodPost, "/select", tr.AdminKey, nil, `{"data":{"actor.constructor":1}}`), http.StatusBadRequest, want)
	_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: mustStruct(t, map[string]any{"__proto__": map[string]any{"isGM": true}})})
	wantInvalid(t, "gRPC update", err, want)
	_, err = docs.CreateDocument(ctx, &relayv1.CreateDocumentRequest{EntityType: "Actor", Data: mustStruct(t, map[string]any{"name": "Proto", "type": "npc", "prototype": 1})})
	wantInvalid(t, "gRPC create", err, want)
	// A script's object literal sets the prototype (no key); JSON.parse
	// and computed keys make real ones, which are refused.
	for _, data := range []string{`JSON.parse('{"__proto__": {"x": 1}}')`, `{["constructor"]: 1}`} {
		resp := tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `await game.update("` + relaytest.AriaUUID + `", ` + data + `)`})
		wantREST(t, "script "+data, resp, http.StatusBadRequest, want)
	}
	tr.unchanged(t, relaytest.AriaUUID, before, "refused keys")

	resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, `{"uuid":"`+relaytest.AriaUUID+`","data":{"flags":{"constructors":1,"my_prototype":2}}}`)
	if resp.Status != http.StatusOK {
		t.Fatalf("keys containing the words: %d %s", resp.Status, resp.Body)
	}
}

// TestDiceLimits: absurd dice counts, faces, numbers, products of dice,
// long formulas and deep nesting are refused with 400 naming the limit,
// over REST and gRPC, never answered with a total (0 or any other).
func TestDiceLimits(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn, ctx := tr.grpcClient(t)
	dnd := relayv1.NewDnd5EServiceClient(conn)
	noChat := false
	for _, tc := range []struct{ bonus, want string }{
		{"1000000000d6", "at most 1000 dice may be rolled"},
		{"99999999999999999999999999d6", "at most 1000 dice may be rolled"},
		{"1d1000000000000", "dice may have at most 10000 faces"},
		{"600d6 + 600d6", "rolls 1200 dice, more than 1000"},
		{"4d6kh99999999999", "a keep or drop count may be at most 1000"},
		{"100d100*100d100*100d100*100d100*100d100", "beyond ±9007199254740991"},
		{strings.Repeat("9", 400), "numbers may be at most 9007199254740991"},
		{"1" + strings.Repeat(" + 1", 300), "longer than 1000 characters"},
		{strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40), "nested deeper than 32 levels"},
	} {
		resp := tr.Do(http.MethodPost, "/dnd5e/skill-check", tr.AdminKey, nil, map[string]any{"actorUuid": relaytest.AriaUUID, "skill": "arc", "bonus": tc.bonus, "createChatMessage": false})
		wantREST(t, "REST bonus "+tc.bonus[:min(len(tc.bonus), 30)], resp, http.StatusBadRequest, tc.want)
		_, err := dnd.SkillCheck(ctx, &relayv1.SkillCheckRequest{ActorUuid: relaytest.AriaUUID, Skill: "arc", Bonus: tc.bonus, CreateChatMessage: &noChat})
		wantInvalid(t, "gRPC bonus "+tc.bonus[:min(len(tc.bonus), 30)], err, tc.want)
	}
}

// TestErrorsHideServerPaths: failures of the file system and of a world's
// database answer with messages in the caller's terms; the data
// directory's path, SQL and Go internals stay in the log.
func TestErrorsHideServerPaths(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	conn, ctx := tr.grpcClient(t)
	abs, err := filepath.Abs(tr.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	leaks := func(what, text string) {
		t.Helper()
		for _, secret := range []string{abs, tr.DataDir, "world.db", "relay.db", "sqlite", "SQL", ".relay-upload", "goroutine", ".go:"} {
			if strings.Contains(text, secret) {
				t.Fatalf("%s: the answer shows %q: %s", what, secret, text)
			}
		}
	}
	// A world whose database is damaged.
	broken := filepath.Join(tr.DataDir, "worlds", "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, "world.db"), bytes.Repeat([]byte("not a database "), 1000), 0o644); err != nil {
		t.Fatal(err)
	}
	resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", "broken", "uuid", relaytest.AriaUUID), nil)
	if resp.Status != http.StatusServiceUnavailable || resp.ErrorText(t) != "World broken could not be opened" {
		t.Fatalf("damaged world: %d %s", resp.Status, resp.Body)
	}
	leaks("damaged world over REST", string(resp.Body))
	_, err = relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "broken", Uuid: relaytest.AriaUUID})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("damaged world over gRPC: %v", err)
	}
	leaks("damaged world over gRPC", err.Error())

	// The file area: a file where a directory should be, a directory where
	// a file should be.
	file := []byte("hello")
	body, ct := multipartBody(t, [][2]string{{"path", "handouts/welcome.md/inside"}}, "x.txt", file)
	resp = tr.send(http.MethodPost, "/upload", tr.AdminKey, nil, body, ct)
	if resp.Status < 400 {
		t.Fatalf("upload under a file: %d %s", resp.Status, resp.Body)
	}
	leaks("upload under a file", string(resp.Body))
	for _, path := range []string{"/download", "/file-system"} {
		for _, p := range []string{"handouts", "handouts/welcome.md/x", "../../relay.db", "maps/tavern.svg/x"} {
			resp := tr.Do(http.MethodGet, path, tr.AdminKey, relaytest.Q("path", p), nil)
			leaks(path+" "+p, string(resp.Body))
		}
	}
	stream, err := relayv1.NewFileServiceClient(conn).UploadFile(ctx)
	if err == nil {
		_ = stream.Send(&relayv1.UploadFileRequest{Path: "handouts/welcome.md", Filename: "x.txt"})
		_ = stream.Send(&relayv1.UploadFileRequest{Chunk: file})
		_, err = stream.CloseAndRecv()
	}
	if err == nil {
		t.Fatal("gRPC upload under a file succeeded")
	}
	leaks("gRPC upload under a file", err.Error())
	dl, err := relayv1.NewFileServiceClient(conn).DownloadFile(ctx, &relayv1.DownloadFileRequest{Path: "handouts"})
	if err == nil {
		_, err = dl.Recv()
	}
	if err == nil || err == io.EOF {
		t.Fatalf("gRPC download of a directory: %v", err)
	}
	leaks("gRPC download of a directory", err.Error())
	// Scripts see world errors as messages too.
	resp = tr.Do(http.MethodPost, "/execute-js", tr.AdminKey, nil, map[string]any{"script": `try { await game.get("Actor.nope") } catch (e) { return JSON.stringify(e) + e.message + e.stack }`})
	leaks("script", string(resp.Body))
}

// TestLimitFlags: every limit of this file is a `relay serve` flag with a
// RELAY_* variable and a default, documented in the help, and limits too
// small for the relay to work with are refused before it starts. Not
// parallel: it sets environment variables.
func TestLimitFlags(t *testing.T) {
	_, help, _ := cli(t, "serve", "-h")
	for _, want := range []string{
		"-max-body-bytes", "RELAY_MAX_BODY_BYTES", "(default 1048576)",
		"-max-document-bytes", "RELAY_MAX_DOCUMENT_BYTES", "(default 2097152)",
		"-max-json-depth", "RELAY_MAX_JSON_DEPTH", "(default 64)",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("serve -h does not mention %q", want)
		}
	}
	t.Setenv("RELAY_MAX_DOCUMENT_BYTES", "4096")
	t.Setenv("RELAY_MAX_JSON_DEPTH", "12")
	t.Setenv("RELAY_MAX_BODY_BYTES", "8192")
	cfg, err := loadServeConfig(nil, io.Discard)
	if err != nil || cfg.MaxDocumentBytes != 4096 || cfg.MaxJSONDepth != 12 || cfg.MaxBodyBytes != 8192 {
		t.Fatalf("from the environment: %+v %v", cfg, err)
	}
	for _, args := range [][]string{{"--max-body-bytes", "100"}, {"--max-document-bytes", "10"}, {"--max-json-depth", "2"}} {
		if _, _, err := cli(t, append([]string{"serve", "--data", t.TempDir()}, args...)...); err == nil || !strings.Contains(err.Error(), args[0]+" must be at least") {
			t.Errorf("serve %v: %v", args, err)
		}
	}
}

// TestServeRefusesShortClusterSecret: `relay serve` refuses a cluster
// secret under 32 bytes at start, from the command line or from the file
// the environment names, with a message naming the flag.
func TestServeRefusesShortClusterSecret(t *testing.T) {
	common := []string{"serve", "--data", t.TempDir(), "--node-name", "n1", "--cluster-listen", "127.0.0.1:0"}
	if _, _, err := cli(t, append(common, "--cluster-secret", "hunter2")...); err == nil || !strings.Contains(err.Error(), "--cluster-secret must be at least 32 bytes, not 7") {
		t.Errorf("a short secret on the command line: %v", err)
	}
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("RELAY_CLUSTER_SECRET_FILE", file)
	if _, _, err := cli(t, common...); err == nil || !strings.Contains(err.Error(), "--cluster-secret must be at least 32 bytes, not 7") {
		t.Errorf("a short secret in RELAY_CLUSTER_SECRET_FILE: %v", err)
	}
}

// TestServeRefusesOpenRoutesWithoutSecret: `relay serve` whose route port
// is open beyond loopback refuses to start without a cluster secret, and
// says why and what to do.
func TestServeRefusesOpenRoutesWithoutSecret(t *testing.T) {
	_, _, err := cli(t, "serve", "--data", t.TempDir(), "--node-name", "n1", "--cluster-listen", "0.0.0.0:0")
	if err == nil || !strings.Contains(err.Error(), "--cluster-listen 0.0.0.0:0 is open beyond loopback, and no --cluster-secret") || !strings.Contains(err.Error(), "--cluster-insecure") {
		t.Fatalf("serve with an open route port and no secret: %v", err)
	}
}
