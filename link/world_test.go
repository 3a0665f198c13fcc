package link_test

import (
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
)

// recorder answers requests from a table of canned replies and keeps
// every request it saw.
type recorder struct {
	mu       sync.Mutex
	requests []map[string]any
	replies  map[string]map[string]any
}

func (r *recorder) handle(_ context.Context, req linktest.Request) (any, bool) {
	var m map[string]any
	_ = req.Params(&m)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, m)
	reply, ok := r.replies[req.Type]
	return reply, ok
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.requests)
}

func (r *recorder) at(i int) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[i]
}

func (r *recorder) last() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests[len(r.requests)-1]
}

// linkedWorld connects a tabletop answering from rec and returns its
// linked world.
func linkedWorld(t *testing.T, rec *recorder) (*env, *link.Linked, string) {
	t.Helper()
	e := newEnv(t)
	tt := e.connected(func(c *linktest.Config) { c.Handler = rec.handle })
	clientID, _ := tt.Credentials()
	e.wait("the player list", func() bool { info, _ := e.svc.Hub().Info(clientID); return len(info.Players) == 2 })
	return e, link.NewLinked(e.svc.Hub(), clientID, world.Info{Title: "Paired title"}), clientID
}

// TestLinkedRequests: each operation goes to the module as its request
// type with its parameters, the user's id and `_scopes`, and the
// module's reply comes back as the world's result type.
func TestLinkedRequests(t *testing.T) {
	actor := map[string]any{"_id": "a1", "name": "Hero", "type": "character"}
	rec := &recorder{replies: map[string]map[string]any{
		"entity":        {"uuid": "Actor.a1", "data": actor},
		"update":        {"uuid": "Actor.a1", "entity": []any{actor}},
		"create":        {"uuid": "Actor.a1", "entity": actor},
		"delete":        {"uuid": "Actor.a1", "success": true},
		"increase":      {"success": true, "results": []any{map[string]any{"uuid": "Actor.a1", "attribute": "system.hp", "oldValue": 3, "newValue": 5}}},
		"decrease":      {"success": true, "results": []any{map[string]any{"uuid": "Actor.a1", "attribute": "system.hp", "oldValue": 5, "newValue": 3}}},
		"give":          {"fromUuid": "", "toUuid": "Actor.a1", "itemUuid": "Item.i1", "newItemId": "n1", "quantity": 2, "success": true},
		"remove":        {"actorUuid": "Actor.a1", "itemUuid": "Actor.a1.Item.n1", "quantity": 0, "success": true},
		"kill":          {"results": []any{map[string]any{"uuid": "Actor.a1", "success": true, "message": "dead"}}},
		"search":        {"query": "he", "results": []any{map[string]any{"uuid": "Actor.a1", "name": "Hero"}}},
		"structure":     {"data": map[string]any{"folders": map[string]any{}}},
		"create-folder": {"data": map[string]any{"id": "f1", "name": "Heroes"}},
		"delete-folder": {"data": map[string]any{"deleted": true, "folderId": "f1", "entitiesDeleted": 2, "foldersDeleted": 1}},
		"select":        {"success": true, "count": 1, "selected": []any{"Scene.s.Token.t"}},
		"selected":      {"success": true, "selected": []any{map[string]any{"tokenUuid": "Scene.s.Token.t", "actorUuid": nil}}},
		"encounters": {"encounters": []any{map[string]any{"id": "c1", "name": "Fight", "round": 1, "turn": 0, "current": true,
			"combatants": []any{map[string]any{"id": "k1", "name": "Hero", "tokenUuid": "Scene.s.Token.t", "actorUuid": "Actor.a1", "img": nil, "initiative": 12, "hidden": false, "defeated": false}}}}},
		"start-encounter":       {"encounterId": "c1", "encounter": map[string]any{"id": "c1", "name": "Fight", "round": 1, "turn": 0, "combatants": []any{}}},
		"last-turn":             {"encounterId": "c1", "action": "previousTurn", "currentTurn": 0, "currentRound": 1, "actorTurn": "Actor.a1", "tokenTurn": nil, "encounter": map[string]any{"id": "c1", "name": "Fight", "round": 1, "turn": 0}},
		"end-encounter":         {"encounterId": "c1", "message": "Encounter successfully ended"},
		"add-to-encounter":      {"encounterId": "c1", "added": []any{"Actor.a1"}, "failed": []any{map[string]any{"uuid": "Actor.zz", "reason": "Entity not found"}}},
		"remove-from-encounter": {"encounterId": "c1", "removed": []any{"Actor.a1"}, "failed": []any{}},
		"file-system":           {"success": true, "path": "maps", "source": "data", "recursive": false, "results": []any{map[string]any{"name": "a.png", "path": "maps/a.png", "type": "file"}}},
		"download-file":         {"success": true, "path": "maps/a.png", "fileData": "data:image/png;base64,aGVsbG8=", "filename": "a.png", "mimeType": "image/png"},
		"upload-file":           {"success": true, "path": "maps/b.png"},
		"execute-js":            {"success": true, "result": map[string]any{"n": 3}},
	}}
	_, w, clientID := linkedWorld(t, rec)
	alice := &world.User{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer}
	ctx := world.WithCaller(context.Background(), &world.Caller{Scopes: []string{"entity:read", "entity:write"}})

	// The module's document has no uuid: the relay gives it the one asked
	// for. A request carries no `data` of its own.
	doc, err := w.Get(ctx, alice, "Actor.a1")
	if err != nil || !reflect.DeepEqual(doc, world.Document{"_id": "a1", "name": "Hero", "type": "character", "uuid": "Actor.a1"}) {
		t.Fatalf("get: %v, %v", doc, err)
	}
	got := rec.last()
	if _, hasData := got["data"]; got["type"] != "entity" || got["uuid"] != "Actor.a1" || got["userId"] != alice.ID ||
		!reflect.DeepEqual(got["_scopes"], []any{"entity:read", "entity:write"}) || hasData {
		t.Fatalf("entity request %v", got)
	}
	// No user and no scopes: neither is sent (GM-level, as the module
	// reads a master key).
	if _, err := w.Get(context.Background(), nil, "Actor.a1"); err != nil {
		t.Fatal(err)
	}
	if got := rec.last(); got["userId"] != nil || got["_scopes"] != nil {
		t.Fatalf("unscoped request %v", got)
	}

	if doc, err := w.Update(ctx, nil, "Actor.a1", world.Document{"name": "Hero"}); err != nil || doc["name"] != "Hero" {
		t.Fatalf("update: %v, %v", doc, err)
	}
	if got := rec.last(); !reflect.DeepEqual(got["data"], map[string]any{"name": "Hero"}) {
		t.Fatalf("update request %v", got)
	}
	if doc, err := w.Create(ctx, nil, world.CreateParams{Type: "Actor", Data: actor, Folder: "f1"}); err != nil || doc["_id"] != "a1" {
		t.Fatalf("create: %v, %v", doc, err)
	}
	if got := rec.last(); got["entityType"] != "Actor" || got["folder"] != "f1" {
		t.Fatalf("create request %v", got)
	}
	if err := w.Delete(ctx, nil, "Actor.a1"); err != nil {
		t.Fatal(err)
	}
	if ch, err := w.ModifyAttribute(ctx, nil, "Actor.a1", "system.hp", 2); err != nil || ch.NewValue != 5 {
		t.Fatalf("increase: %+v, %v", ch, err)
	}
	if ch, err := w.ModifyAttribute(ctx, nil, "Actor.a1", "system.hp", -2); err != nil || ch.NewValue != 3 || rec.last()["amount"] != 2.0 {
		t.Fatalf("decrease: %+v, %v, %v", ch, err, rec.last())
	}
	if g, err := w.Give(ctx, nil, world.GiveParams{ToUUID: "Actor.a1", ItemUUID: "Item.i1", Quantity: 2}); err != nil ||
		g.NewItemUUID != "Actor.a1.Item.n1" || g.Quantity != 2 {
		t.Fatalf("give: %+v, %v", g, err)
	}
	if r, err := w.Remove(ctx, nil, world.RemoveParams{ActorUUID: "Actor.a1", ItemUUID: "Actor.a1.Item.n1"}); err != nil || !r.Deleted {
		t.Fatalf("remove: %+v, %v", r, err)
	}
	if k, err := w.Kill(ctx, nil, "Actor.a1"); err != nil || k.Message != "dead" {
		t.Fatalf("kill: %+v, %v", k, err)
	}
	if res, err := w.Search(ctx, nil, world.SearchParams{Query: "he", Limit: 5}); err != nil || len(res) != 1 || rec.last()["limit"] != 5.0 {
		t.Fatalf("search: %v, %v", res, err)
	}
	if s, err := w.Structure(ctx, nil, world.StructureParams{Types: []string{"Actor"}, Recursive: true}); err != nil || s["folders"] == nil {
		t.Fatalf("structure: %v, %v", s, err)
	}
	if f, err := w.CreateFolder(ctx, nil, world.FolderParams{Name: "Heroes", Type: "Actor"}); err != nil || f["id"] != "f1" || rec.last()["folderType"] != "Actor" {
		t.Fatalf("create-folder: %v, %v", f, err)
	}
	if d, err := w.DeleteFolder(ctx, nil, "f1", true); err != nil || d != (world.FolderDeletion{FolderID: "f1", EntitiesDeleted: 2, FoldersDeleted: 1}) {
		t.Fatalf("delete-folder: %+v, %v", d, err)
	}
	if s, err := w.Select(ctx, nil, world.SelectParams{All: true}); err != nil || len(s) != 1 {
		t.Fatalf("select: %v, %v", s, err)
	}
	if s, err := w.Selected(ctx, nil); err != nil || len(s) != 1 || s[0].ActorUUID != "" {
		t.Fatalf("selected: %v, %v", s, err)
	}

	if list, err := w.ListEncounters(ctx, alice); err != nil || len(list) != 1 || *list[0].Combatants[0].Initiative != 12 || !list[0].Current {
		t.Fatalf("encounters: %+v, %v", list, err)
	}
	if enc, err := w.StartEncounter(ctx, nil, world.StartEncounterParams{Name: "Fight", WithPlayers: true}); err != nil || enc.ID != "c1" ||
		!enc.Started || rec.last()["startWithPlayers"] != true {
		t.Fatalf("start: %+v, %v", enc, err)
	}
	// The module's answer to a move names the encounter without its
	// combatants: the relay reads them from the list of encounters.
	before := rec.count()
	if pos, err := w.NavigateEncounter(ctx, nil, "", world.PreviousTurn); err != nil || pos.Action != world.PreviousTurn ||
		pos.ActorUUID != "Actor.a1" || len(pos.Encounter.Combatants) != 1 || rec.at(before)["type"] != "last-turn" {
		t.Fatalf("navigate: %+v, %v", pos, err)
	}
	if id, err := w.EndEncounter(ctx, nil, "c1"); err != nil || id != "c1" {
		t.Fatalf("end: %v, %v", id, err)
	}
	if res, err := w.AddToEncounter(ctx, nil, world.EncounterMembersParams{UUIDs: []string{"Actor.a1", "Actor.zz"}}); err != nil ||
		len(res.Done) != 1 || res.Failed[0].Reason != "Entity not found" {
		t.Fatalf("add: %+v, %v", res, err)
	}
	if res, err := w.RemoveFromEncounter(ctx, nil, world.EncounterMembersParams{UUIDs: []string{"Actor.a1"}}); err != nil || len(res.Done) != 1 {
		t.Fatalf("remove: %+v, %v", res, err)
	}
	if dir, entries, err := w.ListFiles(ctx, nil, world.ListFilesParams{Path: "maps"}); err != nil || dir != "maps" || len(entries) != 1 {
		t.Fatalf("files: %v %v %v", dir, entries, err)
	}
	if f, err := w.OpenFile(ctx, nil, "maps/a.png"); err != nil || f.MIMEType != "image/png" || f.Size != 5 {
		t.Fatalf("download: %+v, %v", f, err)
	} else if b, _ := io.ReadAll(f.Body); string(b) != "hello" {
		t.Fatalf("downloaded %q", b)
	}
	if fw, err := w.WriteFile(ctx, nil, world.WriteFileParams{Dir: "maps", Name: "b.png", MaxBytes: 10}, strings.NewReader("hello")); err != nil ||
		fw.Size != 5 || rec.last()["fileData"] != "data:application/octet-stream;base64,aGVsbG8=" {
		t.Fatalf("upload: %+v, %v", fw, err)
	}
	n := len(rec.requests)
	if _, err := w.WriteFile(ctx, nil, world.WriteFileParams{Dir: "maps", Name: "b.png", MaxBytes: 4}, strings.NewReader("hello")); !errors.Is(err, world.ErrTooLarge) || len(rec.requests) != n {
		t.Fatalf("too large upload: %v (sent: %v)", err, len(rec.requests) != n)
	}

	if res, err := w.ExecuteJS(ctx, nil, "return {n: 3}", world.ScriptOptions{}); err != nil || res.Value.(map[string]any)["n"] != 3.0 ||
		rec.last()["script"] != "return {n: 3}" {
		t.Fatalf("execute-js: %+v, %v", res, err)
	}

	// The world describes itself from its connection, and its users are
	// the player list.
	if info := w.Info(); info.ClientID != clientID || info.Title != "Tavern Tales" || info.System != "dnd5e" {
		t.Fatalf("info %+v", info)
	}
	if u, err := w.ResolveUser(ctx, "alice"); err != nil || *u != *alice {
		t.Fatalf("resolve: %v, %v", u, err)
	}
	if _, err := w.ResolveUser(ctx, "Nobody"); !errors.Is(err, world.ErrInvalid) || err.Error() != "User not found: Nobody" {
		t.Fatalf("unknown user: %v", err)
	}
	if us, err := w.Users(ctx); err != nil || len(us) != 2 || us[0].Name != "Alice" {
		t.Fatalf("users: %v, %v", us, err)
	}
	if w.Can(alice, world.PermissionFilesBrowse) || !w.Can(nil, world.PermissionFilesUpload) {
		t.Fatal("a player browses files by default, or GM-level access cannot upload")
	}
	// What the linked world does not offer is 501 naming the operation.
	if _, err := world.Capability[world.Dnd5e](w, "dnd5e/short-rest"); !errors.Is(err, world.ErrUnimplemented) ||
		err.Error() != "World '"+clientID+"' does not offer dnd5e/short-rest" {
		t.Fatalf("dnd5e: %v", err)
	}
	if _, err := w.Create(ctx, nil, world.CreateParams{Type: "Item", ParentUUID: "Actor.a1"}); !errors.Is(err, world.ErrUnimplemented) {
		t.Fatalf("embedded create: %v", err)
	}
}

// TestLinkedErrors: the module's error texts become world errors of their
// kind with the text kept; a world that is not connected is
// ErrNotConnected at once.
func TestLinkedErrors(t *testing.T) {
	rec := &recorder{replies: map[string]map[string]any{}}
	e, w, clientID := linkedWorld(t, rec)
	cases := []struct {
		text string
		kind error
	}{
		{"User not found: bob", world.ErrInvalid},
		{"User 'Alice' does not have permission to view this entity", world.ErrPermission},
		{"User 'Alice' must be a GM to create folders", world.ErrPermission},
		{"User 'Alice' does not have 'FILES_BROWSE' permission required to browse the file system", world.ErrPermission},
		{"macro:write scope is required to create macros", world.ErrPermission},
		{"Entity not found", world.ErrNotFound},
		{"Folder not found with ID: x", world.ErrNotFound},
		{"Entity with ID 'a' already exists. Set override=true to replace it.", world.ErrConflict},
		{"No active scene found", world.ErrFailedPrecondition},
		{"UUID or selected is required", world.ErrInvalid},
		{"Amount must be a number", world.ErrInvalid},
	}
	for _, c := range cases {
		rec.mu.Lock()
		rec.replies["entity"] = map[string]any{"uuid": "Actor.x", "error": c.text, "data": nil}
		rec.mu.Unlock()
		_, err := w.Get(context.Background(), nil, "Actor.x")
		var werr *world.Error
		if !errors.Is(err, c.kind) || !errors.As(err, &werr) || werr.Msg != c.text {
			t.Errorf("%q: got %v, want kind %v", c.text, err, c.kind)
		}
	}
	// A reply without a document is the document's absence.
	rec.mu.Lock()
	rec.replies["entity"] = map[string]any{"uuid": "Actor.x", "data": "nonsense"}
	rec.mu.Unlock()
	if _, err := w.Get(context.Background(), nil, "Actor.x"); !errors.Is(err, world.ErrNotFound) {
		t.Errorf("no document: %v", err)
	}

	e.svc.Hub().Disconnect(clientID, link.CloseNormal, "test")
	e.wait("the disconnection", func() bool { return !e.svc.Hub().Online(clientID) })
	_, err := w.Get(context.Background(), nil, "Actor.x")
	if !errors.Is(err, link.ErrNotConnected) || !errors.Is(err, world.ErrUnavailable) || err.Error() != "world "+clientID+" is not connected" {
		t.Fatalf("not connected: %v", err)
	}
	if _, err := w.ResolveUser(context.Background(), "alice"); !errors.Is(err, link.ErrNotConnected) {
		t.Fatalf("resolve while not connected: %v", err)
	}
	if info := w.Info(); info.Title != "Paired title" || info.ClientID != clientID {
		t.Fatalf("info while not connected: %+v", info)
	}
}
