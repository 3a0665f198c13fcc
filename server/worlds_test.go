package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/tabletop-relay/relay/gateway"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
)

// The services know worlds only through the capability interfaces of
// package world. These tests prove it with worlds of another kind than the
// embedded engine: fakeWorld offers every capability with canned answers
// and records what it was asked, bareWorld offers none beyond what every
// world offers. Both are served through server.New's real interceptor
// chain, over the network gRPC server and over REST (the gateway on the
// in-process connection).

// fakeWorld is a hand-written world. The embedded interfaces are nil: only
// the methods written below answer, and any other would panic (a bug the
// recovery interceptor would report as Internal).
type fakeWorld struct {
	world.Documents
	world.DocumentSearch
	world.Folders
	world.Selection
	world.Encounters
	world.Files
	world.Scripts
	world.Dnd5e

	id string
	// events feeds the live events of every subscription.
	events chan world.Event

	mu    sync.Mutex
	users []string // the user of every call, "GM" for none
}

var alice = &world.User{ID: "aliceUser0000001", Name: "Alice", Role: world.RolePlayer}

func (w *fakeWorld) Info() world.Info {
	return world.Info{ClientID: w.id, Title: "Fake", System: "fake"}
}

func (w *fakeWorld) ResolveUser(_ context.Context, idOrName string) (*world.User, error) {
	if strings.EqualFold(idOrName, alice.Name) || idOrName == alice.ID {
		return alice, nil
	}
	return nil, world.Errorf(world.ErrInvalid, "User not found: %s", idOrName)
}

func (w *fakeWorld) Users(context.Context) ([]world.User, error) { return []world.User{*alice}, nil }

func (w *fakeWorld) Can(*world.User, string) bool { return true }

// saw records the user of a call.
func (w *fakeWorld) saw(user *world.User) {
	w.mu.Lock()
	defer w.mu.Unlock()
	name := "GM"
	if user != nil {
		name = user.Name
	}
	w.users = append(w.users, name)
}

// lastUser is the user of the latest call.
func (w *fakeWorld) lastUser() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.users) == 0 {
		return ""
	}
	return w.users[len(w.users)-1]
}

func (w *fakeWorld) GetJSON(_ context.Context, user *world.User, uuid string) ([]byte, error) {
	w.saw(user)
	if uuid != "Actor.fake" {
		return nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
	}
	return []byte(`{"_id":"fake","name":"From the fake world"}`), nil
}

func (w *fakeWorld) CreateFolder(_ context.Context, user *world.User, p world.FolderParams) (world.Document, error) {
	w.saw(user)
	return world.Document{"id": "folder0000000001", "uuid": "Folder.folder0000000001", "name": p.Name, "type": p.Type}, nil
}

func (w *fakeWorld) Select(_ context.Context, user *world.User, p world.SelectParams) ([]string, error) {
	w.saw(user)
	return p.UUIDs, nil
}

func (w *fakeWorld) ExecuteJS(_ context.Context, user *world.User, script string, opts world.ScriptOptions) (world.ScriptResult, error) {
	w.saw(user)
	return world.ScriptResult{Value: map[string]any{"ran": script, "timeout": opts.Timeout.String()}, Logs: []string{"hello"}}, nil
}

func (w *fakeWorld) ListEncounters(_ context.Context, user *world.User) ([]world.Encounter, error) {
	w.saw(user)
	return []world.Encounter{{ID: "fight", Name: "Fake fight", Round: 2, Current: true}}, nil
}

func (w *fakeWorld) ListFiles(_ context.Context, user *world.User, p world.ListFilesParams) (string, []world.FileEntry, error) {
	w.saw(user)
	return p.Path, []world.FileEntry{{Name: "map.svg", Path: p.Path + "/map.svg", Type: "file", Size: 1234567, Modified: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}}, nil
}

func (w *fakeWorld) OpenFile(_ context.Context, user *world.User, path string) (*world.FileContent, error) {
	w.saw(user)
	body := "the fake file at " + path
	return &world.FileContent{Path: path, Name: filepath.Base(path), MIMEType: "text/plain", Size: int64(len(body)), Body: io.NopCloser(strings.NewReader(body))}, nil
}

func (w *fakeWorld) SkillCheck(_ context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	w.saw(user)
	return world.RollResult{ActorUUID: p.ActorUUID, Total: 17, Formula: "1d20 + 5", Result: "12 + 5"}, nil
}

func (w *fakeWorld) Subscribe(_ context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	w.saw(user)
	return &fakeSubscription{events: w.events}, nil
}

// fakeSubscription hands out the events of its world's channel.
type fakeSubscription struct {
	events chan world.Event
}

func (s *fakeSubscription) Reset() (world.EventReset, bool) { return world.EventReset{}, false }
func (s *fakeSubscription) Replay() []world.Event           { return nil }
func (s *fakeSubscription) Start() uint64                   { return 0 }
func (s *fakeSubscription) Close()                          {}

func (s *fakeSubscription) Next(ctx context.Context) (world.Event, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-ctx.Done():
		return world.Event{}, ctx.Err()
	}
}

// bareWorld offers only what every world offers.
type bareWorld struct{ id string }

func (w bareWorld) Info() world.Info { return world.Info{ClientID: w.id, Title: "Bare"} }
func (w bareWorld) ResolveUser(_ context.Context, idOrName string) (*world.User, error) {
	return nil, world.Errorf(world.ErrInvalid, "User not found: %s", idOrName)
}
func (w bareWorld) Users(context.Context) ([]world.User, error) { return nil, nil }
func (w bareWorld) Can(*world.User, string) bool                { return true }

// registry is a fixed set of worlds.
type registry map[string]world.World

func (r registry) World(_ context.Context, clientID string) (world.World, error) {
	if w, ok := r[clientID]; ok {
		return w, nil
	}
	return nil, world.Errorf(world.ErrNotFound, "Unknown world: %s", clientID)
}

func (r registry) List(context.Context) ([]world.Info, error) {
	var out []world.Info
	for _, id := range []string{"fake", "bare"} {
		out = append(out, r[id].Info())
	}
	return out, nil
}

func (r registry) IDs(context.Context) ([]string, error) { return []string{"bare", "fake"}, nil }

// fakeRelay is a relay serving the fake worlds: gRPC on a loopback port,
// REST through the gateway.
type fakeRelay struct {
	fake *fakeWorld
	key  string
	conn *grpc.ClientConn
	rest string
}

func startFakeRelay(t *testing.T) *fakeRelay {
	t.Helper()
	dir := t.TempDir()
	store, err := keys.Open(filepath.Join(dir, "relay.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	key, _, err := store.Bootstrap(context.Background(), filepath.Join(dir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeWorld{id: "fake", events: make(chan world.Event, 8)}
	ids := server.NewRequestIDs(1, nil)
	s, err := server.New(server.Config{
		Keys:          store,
		Worlds:        registry{"fake": fake, "bare": bareWorld{id: "bare"}},
		RequestIDs:    ids,
		ScriptTimeout: 3 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.GRPC.Serve(lis) }()
	t.Cleanup(func() { s.Stop(context.Background()) })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	rest, err := gateway.New(context.Background(), s.Local, gateway.Options{NewRequestID: ids.New, KeepaliveInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(rest)
	t.Cleanup(hs.Close)
	return &fakeRelay{fake: fake, key: key, conn: conn, rest: hs.URL}
}

// ctx is a context carrying the admin key.
func (r *fakeRelay) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", r.key)
}

// call sends a REST request with the admin key and returns the status and
// the decoded body.
func (r *fakeRelay) call(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, r.rest+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-api-key", r.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil && len(raw) > 0 && raw[0] == '{' {
		t.Fatalf("%s %s: %v\n%s", method, path, err, raw)
	}
	return resp.StatusCode, out
}

// TestServicesServeAWorldOfAnotherKind runs one RPC of every service, over
// gRPC, against the fake world.
func TestServicesServeAWorldOfAnotherKind(t *testing.T) {
	t.Parallel()
	r := startFakeRelay(t)
	ctx := r.ctx(t)

	doc, err := relayv1.NewDocumentServiceClient(r.conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "fake", Uuid: "Actor.fake", UserId: "alice"})
	if err != nil || !strings.Contains(string(valueJSON(t, doc.GetDocument())), "From the fake world") {
		t.Fatalf("GetDocument: %v, %v", doc, err)
	}
	if u := r.fake.lastUser(); u != "Alice" {
		t.Fatalf("the world was asked as %q, want the resolved user Alice", u)
	}
	if _, err := relayv1.NewDocumentServiceClient(r.conn).GetDocument(ctx, &relayv1.GetDocumentRequest{ClientId: "fake", Uuid: "Actor.other"}); status.Code(err) != codes.NotFound {
		t.Fatalf("a world error keeps its code: %v", err)
	}
	folder, err := relayv1.NewFolderServiceClient(r.conn).CreateFolder(ctx, &relayv1.CreateFolderRequest{ClientId: "fake", Name: "Loot", FolderType: "Item"})
	if err != nil || folder.GetName() != "Loot" || folder.GetUuid() != "Folder.folder0000000001" {
		t.Fatalf("CreateFolder: %v, %v", folder, err)
	}
	sel, err := relayv1.NewCanvasServiceClient(r.conn).SelectTokens(ctx, &relayv1.SelectTokensRequest{ClientId: "fake", Uuids: []string{"Scene.s.Token.t"}})
	if err != nil || sel.GetCount() != 1 {
		t.Fatalf("SelectTokens: %v, %v", sel, err)
	}
	js, err := relayv1.NewScriptServiceClient(r.conn).ExecuteJs(ctx, &relayv1.ExecuteJsRequest{ClientId: "fake", Script: "return 1"})
	if err != nil || !strings.Contains(string(valueJSON(t, js.GetResult())), `"ran":"return 1"`) || !strings.Contains(string(valueJSON(t, js.GetResult())), `"timeout":"3s"`) || len(js.GetLogs()) != 1 {
		t.Fatalf("ExecuteJs: %v, %v", js, err)
	}
	enc, err := relayv1.NewCombatServiceClient(r.conn).ListEncounters(ctx, &relayv1.ListEncountersRequest{ClientId: "fake"})
	if err != nil || len(enc.GetEncounters()) != 1 || enc.GetEncounters()[0].GetRound() != 2 {
		t.Fatalf("ListEncounters: %v, %v", enc, err)
	}
	files, err := relayv1.NewFileServiceClient(r.conn).ListFiles(ctx, &relayv1.ListFilesRequest{ClientId: "fake", Path: "maps"})
	if err != nil || len(files.GetResults()) != 1 || files.GetResults()[0].GetSize() != 1234567 {
		t.Fatalf("ListFiles: %v, %v", files, err)
	}
	download, err := relayv1.NewFileServiceClient(r.conn).DownloadFile(ctx, &relayv1.DownloadFileRequest{ClientId: "fake", Path: "notes/a.txt"})
	var chunk *relayv1.DownloadFileResponse
	if err == nil {
		chunk, err = download.Recv()
	}
	if err != nil || string(chunk.GetChunk()) != "the fake file at notes/a.txt" {
		t.Fatalf("DownloadFile: %v, %v", chunk, err)
	}
	roll, err := relayv1.NewDnd5EServiceClient(r.conn).SkillCheck(ctx, &relayv1.SkillCheckRequest{ClientId: "fake", ActorUuid: "Actor.fake", Skill: "arc"})
	if err != nil || roll.GetTotal() != 17 || roll.GetFormula() != "1d20 + 5" {
		t.Fatalf("SkillCheck: %v, %v", roll, err)
	}
	clients, err := relayv1.NewClientServiceClient(r.conn).ListClients(ctx, &relayv1.ListClientsRequest{})
	if err != nil || clients.GetTotal() != 2 || clients.GetClients()[0].GetClientId() != "fake" {
		t.Fatalf("ListClients: %v, %v", clients, err)
	}
	if _, err := relayv1.NewKeyServiceClient(r.conn).ListKeys(ctx, &relayv1.ListKeysRequest{}); err != nil {
		t.Fatalf("ListKeys: %v", err)
	}
	if ticket, err := relayv1.NewTicketServiceClient(r.conn).CreateStreamTicket(ctx, &relayv1.CreateStreamTicketRequest{}); err != nil || ticket.GetTicket() == "" {
		t.Fatalf("CreateStreamTicket: %v, %v", ticket, err)
	}

	// A stream: `connected` first, then the world's own events.
	stream, err := relayv1.NewEventServiceClient(r.conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{ClientId: "fake", UserId: "Alice"})
	var first *relayv1.SubscribeActorsResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil || first.GetEvent().GetName() != "connected" || !strings.Contains(string(valueJSON(t, first.GetEvent().GetData())), `"clientId":"fake"`) {
		t.Fatalf("SubscribeActors: %v, %v", first, err)
	}
	r.fake.events <- world.Event{Seq: 7, Name: "actor-update", Data: []byte(`{"uuid":"Actor.fake"}`)}
	ev, err := stream.Recv()
	if err != nil || ev.GetEvent().GetSequence() != 7 || ev.GetEvent().GetName() != "actor-update" {
		t.Fatalf("event: %v, %v", ev, err)
	}
	if u := r.fake.lastUser(); u != "Alice" {
		t.Fatalf("subscribed as %q, want Alice", u)
	}
}

// TestRESTServesAWorldOfAnotherKind runs the same services over REST,
// through the gateway and the in-process connection, the event stream
// included.
func TestRESTServesAWorldOfAnotherKind(t *testing.T) {
	t.Parallel()
	r := startFakeRelay(t)
	for _, c := range []struct {
		method, path, body string
		want               string // in the envelope's data
	}{
		{"GET", "/get?clientId=fake&uuid=Actor.fake", "", "From the fake world"},
		{"POST", "/create-folder", `{"clientId":"fake","name":"Loot","folderType":"Item"}`, "Folder.folder0000000001"},
		{"POST", "/select", `{"clientId":"fake","uuids":["Scene.s.Token.t"]}`, "1 entities selected"},
		{"POST", "/execute-js", `{"clientId":"fake","script":"return 2"}`, "return 2"},
		{"GET", "/encounters?clientId=fake", "", "Fake fight"},
		{"GET", "/file-system?clientId=fake&path=maps", "", `"size":1234567`},
		{"POST", "/dnd5e/skill-check", `{"clientId":"fake","actorUuid":"Actor.fake","skill":"arc"}`, "1d20 + 5"},
		{"GET", "/clients", "", `"clientId":"fake"`},
	} {
		code, body := r.call(t, c.method, c.path, c.body)
		data, _ := json.Marshal(body["data"])
		if code != http.StatusOK || !strings.Contains(string(data), c.want) {
			t.Errorf("%s %s: %d %v; want 200 with %s", c.method, c.path, code, body, c.want)
		}
	}

	// The event stream, as Server-Sent Events.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.rest+"/actor/subscribe?clientId=fake", nil)
	req.Header.Set("x-api-key", r.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("X-Request-Id"), "actor-subscribe_") {
		t.Fatalf("stream: %d, request id %q", resp.StatusCode, resp.Header.Get("X-Request-Id"))
	}
	lines := bufio.NewScanner(resp.Body)
	expect := func(want ...string) {
		t.Helper()
		for _, w := range want {
			if !lines.Scan() {
				t.Fatalf("stream ended before %q: %v", w, lines.Err())
			}
			if got := lines.Text(); !strings.HasPrefix(got, w) {
				t.Fatalf("stream line %q, want %q", got, w)
			}
		}
	}
	expect("retry: 3000", "", "event: connected", `data: {"actorUuid":"","channel":"actor","clientId":"fake"}`, "")
	r.fake.events <- world.Event{Seq: 9, Name: "actor-update", Data: []byte(`{"uuid":"Actor.fake"}`)}
	expect("id: 9", "event: actor-update", `data: {"uuid":"Actor.fake"}`, "")
}

// TestWorldWithoutACapability: a world that lacks a capability answers
// Unimplemented (HTTP 501) naming the operation and the world, on every
// door: unary calls, streams, over gRPC and REST.
func TestWorldWithoutACapability(t *testing.T) {
	t.Parallel()
	r := startFakeRelay(t)
	ctx := r.ctx(t)

	_, err := relayv1.NewDnd5EServiceClient(r.conn).ShortRest(ctx, &relayv1.ShortRestRequest{ClientId: "bare", ActorUuid: "Actor.x"})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "World 'bare' does not offer dnd5e/short-rest" {
		t.Fatalf("ShortRest on a world without the ruleset: %v", err)
	}
	_, err = relayv1.NewDocumentServiceClient(r.conn).UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{ClientId: "bare", Uuid: "Actor.x", Data: &structpb.Struct{}})
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "World 'bare' does not offer update" {
		t.Fatalf("UpdateDocument on a world without documents: %v", err)
	}
	stream, err := relayv1.NewEventServiceClient(r.conn).SubscribeHooks(ctx, &relayv1.SubscribeHooksRequest{ClientId: "bare"})
	if err == nil {
		_, err = stream.Recv()
	}
	if st := status.Convert(err); st.Code() != codes.Unimplemented || st.Message() != "World 'bare' does not offer hooks/subscribe" {
		t.Fatalf("SubscribeHooks on a world without events: %v", err)
	}

	for _, c := range []struct{ method, path, body, want string }{
		{"POST", "/dnd5e/short-rest", `{"clientId":"bare","actorUuid":"Actor.x"}`, "World 'bare' does not offer dnd5e/short-rest"},
		{"GET", "/get?clientId=bare&uuid=Actor.x", "", "World 'bare' does not offer get"},
		{"GET", "/encounters?clientId=bare", "", "World 'bare' does not offer encounters"},
		{"GET", "/file-system?clientId=bare", "", "World 'bare' does not offer file-system"},
		{"GET", "/download?clientId=bare&path=a.txt", "", "World 'bare' does not offer download"},
		{"POST", "/execute-js", `{"clientId":"bare","script":"return 1"}`, "World 'bare' does not offer execute-js"},
		{"GET", "/scene/subscribe?clientId=bare", "", "World 'bare' does not offer scene/subscribe"},
	} {
		code, body := r.call(t, c.method, c.path, c.body)
		if code != http.StatusNotImplemented || body["error"] != c.want {
			t.Errorf("%s %s: %d %v; want 501 %q", c.method, c.path, code, body, c.want)
		}
	}
}
