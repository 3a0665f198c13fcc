package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/jsonvalue"
	"github.com/tabletop-relay/relay/relaytest"
)

// valueJSON is the JSON text of a Value tree a gRPC caller received, in
// encoding/json's stable form (protojson varies its spacing), so that
// tests can look into it.
func valueJSON(t *testing.T, v *structpb.Value) []byte {
	t.Helper()
	if v == nil {
		return []byte("null")
	}
	raw, err := json.Marshal(v.AsInterface())
	if err != nil {
		t.Fatalf("value %v: %v", v, err)
	}
	return raw
}

// grpcAdmin is a context carrying the relay's admin key, for calls over
// its Conn.
func grpcAdmin(t *testing.T, tr *relaytest.Relay) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", tr.AdminKey)
}

// TestGRPCValuesAreJSON: a gRPC caller on the relay's port receives the
// JSON fields as real google.protobuf.Value trees (not bytes, not the
// relay's in-process raw form) equal to what REST answers, and sends
// update data as a Struct tree.
func TestGRPCValuesAreJSON(t *testing.T) {
	t.Parallel()
	tr := relaytest.Start(t)
	ctx := grpcAdmin(t, tr)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)

	got, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID})
	if err != nil {
		t.Fatal(err)
	}
	doc := got.GetDocument()
	if doc.GetStructValue() == nil || len(doc.ProtoReflect().GetUnknown()) != 0 {
		t.Fatalf("the document is not a Value tree holding an object: %v", doc)
	}
	if _, ok := jsonvalue.RawJSON(doc); ok {
		t.Fatal("a raw Value reached a gRPC caller")
	}
	rest := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil)
	if rest.Status != http.StatusOK {
		t.Fatalf("GET /get: %d %s", rest.Status, rest.Body)
	}
	if want := rest.Data(t); !reflect.DeepEqual(doc.AsInterface(), want) {
		t.Fatalf("gRPC and REST documents differ:\ngRPC %s\nREST %s", valueJSON(t, doc), mustJSON(t, want))
	}

	// An update sent as a Struct tree, with a string that needs escaping.
	data, err := structpb.NewStruct(map[string]any{"system.attributes.hp.value": 7, "flags.test.note": "é \"quoted\" <b>\n"})
	if err != nil {
		t.Fatal(err)
	}
	up, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	hp := up.GetDocument().GetStructValue().GetFields()["system"].GetStructValue().GetFields()["attributes"].GetStructValue().GetFields()["hp"].GetStructValue().GetFields()["value"]
	if hp.GetNumberValue() != 7 {
		t.Fatalf("updated hp = %v, want 7", hp)
	}
	after := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t)
	if note := after["flags"].(map[string]any)["test"].(map[string]any)["note"]; note != "é \"quoted\" <b>\n" {
		t.Fatalf("note over REST = %q", note)
	}
	if !reflect.DeepEqual(up.GetDocument().AsInterface(), after) {
		t.Fatalf("the update's document differs from REST's read:\ngRPC %s\nREST %s", valueJSON(t, up.GetDocument()), mustJSON(t, after))
	}

	// A list: search results.
	found, err := docs.SearchDocuments(ctx, &relayv1.SearchDocumentsRequest{Query: "Aria"})
	if err != nil {
		t.Fatal(err)
	}
	restFound := tr.Do(http.MethodGet, "/search", tr.AdminKey, relaytest.Q("query", "Aria"), nil).Data(t)
	if found.GetResults().GetListValue() == nil || !reflect.DeepEqual(found.GetResults().AsInterface(), restFound["results"]) {
		t.Fatalf("search results differ:\ngRPC %s\nREST %s", valueJSON(t, found.GetResults()), mustJSON(t, restFound["results"]))
	}

	// Details not asked for are unset over gRPC and absent over REST.
	details, err := relayv1.NewDnd5EServiceClient(tr.Conn).GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{ActorUuid: relaytest.AriaUUID, Details: []string{"stats"}})
	if err != nil {
		t.Fatal(err)
	}
	if details.GetStats().GetStructValue() == nil || details.GetItems() != nil {
		t.Fatalf("details: stats %v, items %v", details.GetStats(), details.GetItems())
	}
}

// TestGRPCValueLimitsMatchREST: update data that nests too deeply, holds
// a refused key or is too large is refused over gRPC (a Struct tree) as
// over REST (JSON text), with the same message, and nothing changes.
func TestGRPCValueLimitsMatchREST(t *testing.T) {
	t.Parallel()
	tr := relaytest.Start(t)
	ctx := grpcAdmin(t, tr)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)
	before := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Body

	deep := map[string]any{"x": 1.0}
	for range 70 {
		deep = map[string]any{"a": deep}
	}
	for _, tc := range []struct {
		name   string
		data   map[string]any
		status int
		code   codes.Code
	}{
		{"deeper than 64 levels", map[string]any{"flags": deep}, http.StatusBadRequest, codes.InvalidArgument},
		{"a refused key", map[string]any{"flags.__proto__.isGM": true}, http.StatusBadRequest, codes.InvalidArgument},
		{"a refused nested key", map[string]any{"flags": map[string]any{"constructor": map[string]any{"prototype": 1}}}, http.StatusBadRequest, codes.InvalidArgument},
		{"over the size limit", map[string]any{"flags.big": strings.Repeat("x", 70<<10)}, http.StatusRequestEntityTooLarge, codes.ResourceExhausted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rest := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), map[string]any{"data": tc.data})
			if rest.Status != tc.status {
				t.Fatalf("REST: %d %s, want %d", rest.Status, rest.Body, tc.status)
			}
			data, err := structpb.NewStruct(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: data})
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("gRPC: %v, want %v", err, tc.code)
			}
			if tc.code == codes.InvalidArgument && st.Message() != rest.ErrorText(t) {
				t.Fatalf("gRPC says %q, REST %q", st.Message(), rest.ErrorText(t))
			}
		})
	}
	if after := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Body; stripRequestID(before) != stripRequestID(after) {
		t.Fatalf("the document changed:\n%s\n%s", before, after)
	}
}

// TestBufCurlPrintsJSON runs the README's `buf curl` command (buf pinned
// in tools/go.mod, through server reflection) against the relay: the
// document comes out as JSON equal to REST's, not as base64, and an update
// sent as JSON works.
func TestBufCurlPrintsJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("runs buf from tools/go.mod")
	}
	t.Parallel()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	tr := relaytest.Start(t)
	bufCurl := func(method, body string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		// The README's command, flag for flag.
		cmd := exec.CommandContext(ctx, "go", "tool", "-modfile=tools/go.mod", "buf", "curl", "--protocol", "grpc", "--http2-prior-knowledge",
			"-H", "x-api-key: "+tr.AdminKey, "-d", body, "http://"+tr.Addr()+"/relay.v1.DocumentService/"+method)
		cmd.Dir = repo
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("buf curl %s: %v\n%s%s", method, err, out, stderr.Bytes())
		}
		return out
	}
	var got struct {
		Document map[string]any `json:"document"`
	}
	out := bufCurl("GetDocument", `{"uuid":"`+relaytest.AriaUUID+`"}`)
	if err := json.Unmarshal(out, &got); err != nil || got.Document == nil {
		t.Fatalf("buf curl did not print the document as a JSON object (%v):\n%s", err, out)
	}
	rest := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t)
	if !reflect.DeepEqual(got.Document, rest) {
		t.Fatalf("buf curl and REST differ:\n%s\n%s", out, mustJSON(t, rest))
	}
	out = bufCurl("UpdateDocument", `{"uuid":"`+relaytest.AriaUUID+`","data":{"system.attributes.hp.value":9}}`)
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("update: %v\n%s", err, out)
	}
	hp := got.Document["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
	if hp != 9.0 {
		t.Fatalf("hp after the update = %v, want 9\n%s", hp, out)
	}
}

// TestGRPCCannotForgeRawJSON: the in-process form of a REST parameter (a
// Struct carrying JSON text in a private field) means nothing when a gRPC
// caller sends it: the relay drops unknown fields of gRPC requests, so the
// update sees empty data and changes nothing.
func TestGRPCCannotForgeRawJSON(t *testing.T) {
	t.Parallel()
	tr := relaytest.Start(t)
	ctx := grpcAdmin(t, tr)
	forged := jsonvalue.RawStruct([]byte(`{"name":"Forged"}`))
	if _, err := relayv1.NewDocumentServiceClient(tr.Conn).UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: forged}); err != nil && status.Code(err) != codes.InvalidArgument {
		t.Fatalf("forged update: %v", err)
	}
	if name := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t)["name"]; name != "Aria Vale" {
		t.Fatalf("the forged JSON was applied: name %v", name)
	}
}

// TestGRPCRefusesNonFiniteNumbers sends NaN and the infinities, which a
// google.protobuf.Value can hold and JSON cannot, in every kind of
// request field that carries caller data: each is refused with
// InvalidArgument naming the field, as REST refuses what its JSON cannot
// hold, and the document does not change.
func TestGRPCRefusesNonFiniteNumbers(t *testing.T) {
	t.Parallel()
	tr := relaytest.Start(t)
	ctx := grpcAdmin(t, tr)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)
	get := func() string {
		return stripRequestID(tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Body)
	}
	before := get()
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		nested := &structpb.Struct{Fields: map[string]*structpb.Value{
			"flags": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
				"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewNumberValue(bad)}}),
			}}),
		}}
		top := &structpb.Struct{Fields: map[string]*structpb.Value{"system.attributes.hp.value": structpb.NewNumberValue(bad)}}
		for name, call := range map[string]func() error{
			"update, top level": func() error {
				_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: top})
				return err
			},
			"update, nested": func() error {
				_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: nested})
				return err
			},
			"create": func() error {
				data := &structpb.Struct{Fields: map[string]*structpb.Value{"name": structpb.NewStringValue("Odd"), "x": structpb.NewNumberValue(bad)}}
				_, err := docs.CreateDocument(ctx, &relayv1.CreateDocumentRequest{EntityType: "Actor", Data: data})
				return err
			},
		} {
			st := status.Convert(call())
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "'data'") {
				t.Errorf("%s with %v: %v %q, want InvalidArgument naming 'data'", name, bad, st.Code(), st.Message())
			}
		}
	}
	// The refusal shows where the number is.
	nested := &structpb.Struct{Fields: map[string]*structpb.Value{"flags": structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{
		"list": structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewNumberValue(1), structpb.NewNumberValue(math.NaN())}}),
	}})}}
	_, err := docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.AriaUUID, Data: nested})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "(at data.flags.list.1)") {
		t.Errorf("the refusal %q does not show the path data.flags.list.1", msg)
	}
	if after := get(); after != before {
		t.Fatal("the document changed")
	}
}
