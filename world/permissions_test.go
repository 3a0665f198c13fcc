package world

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// structureEntities collects every entity of a Structure answer by uuid.
func structureEntities(st Document) map[string]Document {
	out := map[string]Document{}
	var walk func(node Document)
	walk = func(node Document) {
		for _, e := range node["entities"].([]any) {
			d := e.(Document)
			out[d["uuid"].(string)] = d
		}
		for _, f := range node["folders"].([]any) {
			walk(f.(Document))
		}
	}
	walk(st)
	return out
}

func keysOf(d Document) []string {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestPermissionTable checks each read and write operation for each
// permission level and each kind of caller: a player, a GM, and nobody (GM-
// level access without a user).
func TestPermissionTable(t *testing.T) {
	t.Parallel()
	levels := []struct {
		name  string
		uuid  string
		doc   string
		level Level
	}{
		{"none", actorNone, "Goblin", LevelNone},
		{"limited", actorLimited, "Stranger", LevelLimited},
		{"observer", actorObserver, "Companion", LevelObserver},
		{"owner", actorOwner, "Hero", LevelOwner},
	}
	callers := []struct {
		name string
		id   string // empty: the nil user
	}{
		{"player", aliceID},
		{"gm", gmID},
		{"nil", ""},
	}
	for _, lv := range levels {
		for _, c := range callers {
			t.Run(lv.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				tw := newTestWorld(t)
				var user *User
				effective := LevelOwner
				if c.id != "" {
					user = tw.user(t, c.id)
					if !user.IsGM() {
						effective = lv.level
					}
				}

				// get
				got, err := tw.Get(ctx, user, lv.uuid)
				switch effective {
				case LevelNone:
					wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
				case LevelLimited:
					want := Document{"name": lv.doc, "uuid": lv.uuid, "type": "Actor", "img": "icons/" + lv.doc + ".png"}
					if err != nil || !cmp.Equal(got, want) {
						t.Errorf("get = %v, %v; want %v", got, err, want)
					}
				default:
					if err != nil || got["uuid"] != lv.uuid || got["system"] == nil || got["_id"] == nil {
						t.Errorf("get = %v, %v; want full data", got, err)
					}
				}

				// search
				results, err := tw.Search(ctx, user, SearchParams{Query: lv.doc})
				if err != nil {
					t.Fatal(err)
				}
				i := slices.IndexFunc(results, func(d Document) bool { return d["uuid"] == lv.uuid })
				switch {
				case effective == LevelNone && i >= 0:
					t.Errorf("search shows a NONE document: %v", results[i])
				case effective == LevelLimited && (i < 0 || !cmp.Equal(keysOf(results[i]), []string{"documentType", "id", "img", "name", "uuid"})):
					t.Errorf("search = %v, want a minified entry", results)
				case effective >= LevelObserver && (i < 0 || results[i]["journalLink"] != "@UUID["+lv.uuid+"]{"+lv.doc+"}"):
					t.Errorf("search = %v, want a full entry", results)
				}

				// structure
				st, err := tw.Structure(ctx, user, StructureParams{Recursive: true})
				if err != nil {
					t.Fatal(err)
				}
				entity, listed := structureEntities(st)[lv.uuid]
				if listed != (effective > LevelNone) {
					t.Errorf("structure lists %s: %v, want %v", lv.uuid, listed, effective > LevelNone)
				}
				if listed && !cmp.Equal(keysOf(entity), []string{"id", "img", "name", "type", "uuid"}) {
					t.Errorf("structure entity = %v, want a summary", entity)
				}

				// Write refusals name the document only for those who see it.
				named := lv.doc
				if effective == LevelNone {
					named = lv.uuid
				}

				// update
				updated, err := tw.Update(ctx, user, lv.uuid, Document{"system.attributes.hp.value": 5})
				if effective < LevelOwner {
					wantError(t, err, ErrPermission, "User 'Alice' does not have permission to update '"+named+"'")
				} else if err != nil || num(t, updated, "system.attributes.hp.value") != 5 {
					t.Errorf("update = %v, %v", updated, err)
				}

				// delete
				err = tw.Delete(ctx, user, lv.uuid)
				if effective < LevelOwner {
					wantError(t, err, ErrPermission, "User 'Alice' does not have permission to delete '"+named+"'")
					mustGet(t, tw, lv.uuid)
				} else {
					if err != nil {
						t.Fatal(err)
					}
					_, err = tw.Get(ctx, nil, lv.uuid)
					wantError(t, err, ErrNotFound, "Entity not found: "+lv.uuid)
				}
			})
		}
	}
}

func TestEmbeddedDocumentsUseTheirParentsLevel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, "alice")

	sword, err := tw.Get(ctx, alice, swordUUID)
	if err != nil || sword["name"] != "Sword" || sword["uuid"] != swordUUID {
		t.Fatalf("Get(own item) = %v, %v", sword, err)
	}
	bobsPotion := actorBob + ".Item.ItemPotion000002"
	_, err = tw.Get(ctx, alice, bobsPotion)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	_, err = tw.Update(ctx, alice, bobsPotion, Document{"name": "Mine"})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to update '"+bobsPotion+"'")
	if _, err := tw.Update(ctx, alice, swordUUID, Document{"name": "Blade"}); err != nil {
		t.Fatal(err)
	}
}

func TestDefaultLevelsOfDocumentsWithoutOwnership(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, "alice")

	folder, err := tw.Get(ctx, alice, "Folder."+heroesFolder)
	want := Document{"name": "Heroes", "uuid": "Folder." + heroesFolder, "type": "Folder", "img": nil}
	if err != nil || !cmp.Equal(folder, want) {
		t.Errorf("Get(folder) = %v, %v; want %v", folder, err, want)
	}
	if combat, err := tw.Get(ctx, alice, combatUUID); err != nil || combat["combatants"] == nil {
		t.Errorf("Get(combat) = %v, %v; want full data", combat, err)
	}
	if self, err := tw.Get(ctx, alice, "User."+aliceID); err != nil || self["role"] != 1.0 {
		t.Errorf("Get(own user) = %v, %v; want full data", self, err)
	}
	if _, err := tw.Update(ctx, alice, "User."+aliceID, Document{"role": 4}); err == nil {
		t.Error("a player raised her own role")
	}
}

// TestChatMessageLevels checks the visibility of chat messages: public,
// whispered and blind, for the author, a recipient, anyone else and a GM.
func TestChatMessageLevels(t *testing.T) {
	t.Parallel()
	alice := &User{ID: "alice", Role: RolePlayer}
	bob := &User{ID: "bob", Role: RolePlayer}
	carol := &User{ID: "carol", Role: RolePlayer}
	gm := &User{ID: "gm", Role: RoleGamemaster}
	msg := func(kv ...any) Document {
		d := Document{"author": "alice", "whisper": []any{}}
		for i := 0; i+1 < len(kv); i += 2 {
			d[kv[i].(string)] = kv[i+1]
		}
		return d
	}
	cases := []struct {
		name string
		msg  Document
		want map[*User]Level
	}{
		{"public", msg(), map[*User]Level{alice: LevelOwner, bob: LevelObserver, carol: LevelObserver, gm: LevelOwner}},
		{"whispered to bob", msg("whisper", []any{"bob"}), map[*User]Level{alice: LevelOwner, bob: LevelObserver, carol: LevelNone, gm: LevelOwner}},
		{"blind to the GM", msg("whisper", []any{"gm"}, "blind", true), map[*User]Level{alice: LevelLimited, bob: LevelNone, carol: LevelNone, gm: LevelOwner}},
		{"blind, author among recipients", msg("whisper", []any{"gm", "alice"}, "blind", true), map[*User]Level{alice: LevelOwner, bob: LevelNone, gm: LevelOwner}},
		{"blind but public", msg("blind", true), map[*User]Level{alice: LevelOwner, bob: LevelObserver}},
		{"author by its old field name", Document{"user": "alice", "whisper": []any{"gm"}, "blind": true}, map[*User]Level{alice: LevelLimited, bob: LevelNone}},
	}
	for _, c := range cases {
		for user, want := range c.want {
			if got := LevelOf(user, "ChatMessage", c.msg); got != want {
				t.Errorf("%s: level of %s = %v, want %v", c.name, user.ID, got, want)
			}
		}
	}
}

func TestOwnershipIsGMOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	for _, diff := range []Document{
		{"ownership": Document{bobID: 3}},
		{"ownership." + bobID: 3},
		{"-=ownership": nil},
	} {
		_, err := tw.Update(ctx, alice, actorOwner, diff)
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to change the ownership of 'Hero'")
	}
	gm := tw.user(t, "game master")
	got, err := tw.Update(ctx, gm, actorOwner, Document{"ownership." + bobID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Document{"default": 0.0, aliceID: 3.0, bobID: 3.0}); !cmp.Equal(got["ownership"], want) {
		t.Errorf("ownership = %v, want %v", got["ownership"], want)
	}
}

func TestCreatePermissions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	// A player cannot set the ownership of what they create, in any form.
	for _, data := range []Document{
		{"name": "Newbie", "type": "npc", "ownership": Document{"default": 3}},
		{"name": "Newbie", "type": "npc", "ownership.default": 3},
		{"name": "Newbie", "type": "npc", "-=ownership": nil},
	} {
		_, err := tw.Create(ctx, alice, CreateParams{Type: "Actor", Data: data})
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to set the ownership of a new Actor document: only a GM may set ownership")
	}
	_, err := tw.Create(ctx, alice, CreateParams{Type: "Item", ParentUUID: actorOwner, Data: Document{"name": "Coin", "ownership": Document{bobID: 3}}})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to set the ownership of a new Item document: only a GM may set ownership")

	created, err := tw.Create(ctx, alice, CreateParams{Type: "Actor", Data: Document{"name": "Newbie", "type": "npc"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := (Document{"default": 0.0, aliceID: 3.0}); !cmp.Equal(created["ownership"], want) {
		t.Errorf("ownership = %v, want %v", created["ownership"], want)
	}
	if _, err := tw.Update(ctx, alice, created["uuid"].(string), Document{"name": "Veteran"}); err != nil {
		t.Errorf("the creator cannot update: %v", err)
	}

	_, err = tw.Create(ctx, alice, CreateParams{Type: "Item", Data: Document{"name": "Coin"}})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to create Item documents")

	if _, err := tw.Create(ctx, alice, CreateParams{Type: "Item", ParentUUID: actorOwner, Data: Document{"name": "Coin"}}); err != nil {
		t.Errorf("create embedded on an owned actor: %v", err)
	}
	_, err = tw.Create(ctx, alice, CreateParams{Type: "Item", ParentUUID: actorBob, Data: Document{"name": "Coin"}})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to create embedded documents on '"+actorBob+"'")
}

func TestCan(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	alice, gm, assistant := tw.user(t, aliceID), tw.user(t, gmID), tw.user(t, assistID)
	tests := []struct {
		user *User
		perm string
		want bool
	}{
		{alice, PermissionFilesBrowse, true},
		{alice, PermissionFilesUpload, false},
		{alice, "MACRO_SCRIPT", false},
		{gm, PermissionFilesUpload, true},
		{gm, "ANYTHING", true},
		{gm, "SETTINGS_MODIFY", true},
		{assistant, "SETTINGS_MODIFY", false}, // mapped to the Gamemaster role only
		{assistant, PermissionFilesUpload, true},
		{assistant, "UNMAPPED", true},
		{nil, PermissionFilesUpload, true},
	}
	for _, tt := range tests {
		if got := tw.Can(tt.user, tt.perm); got != tt.want {
			t.Errorf("Can(%v, %s) = %v, want %v", tt.user, tt.perm, got, tt.want)
		}
	}
}

func TestResolveUser(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	ctx := context.Background()
	tests := []struct {
		given  string
		wantID string
		err    string
	}{
		{given: aliceID, wantID: aliceID},
		{given: "Alice", wantID: aliceID},
		{given: "aLiCe", wantID: aliceID},
		{given: "GAME MASTER", wantID: gmID},
		{given: "Nobody", err: "User not found: Nobody"},
		{given: "player0000000001", err: "User not found: player0000000001"}, // ids are case-sensitive
		{given: "", err: "'userId' is required"},
	}
	for _, tt := range tests {
		u, err := tw.ResolveUser(ctx, tt.given)
		if tt.err != "" {
			wantError(t, err, ErrInvalid, tt.err)
			continue
		}
		if err != nil || u.ID != tt.wantID {
			t.Errorf("ResolveUser(%q) = %v, %v; want %s", tt.given, u, err, tt.wantID)
		}
	}
	users, err := tw.Users(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range users {
		names = append(names, u.Name)
	}
	if want := []string{"Alice", "Bob", "Game Master", "Helper"}; !cmp.Equal(names, want) {
		t.Errorf("Users = %v, want %v", names, want)
	}
	if u := tw.user(t, "helper"); !u.IsGM() || u.Role != RoleAssistant {
		t.Errorf("assistant = %+v, want a GM", u)
	}
}
