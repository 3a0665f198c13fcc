package world

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStructure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	hero := Document{"uuid": actorOwner, "id": "ActorOwner000001", "name": "Hero", "type": "Actor", "img": "icons/Hero.png"}
	companion := Document{"uuid": actorObserver, "id": "ActorObserver001", "name": "Companion", "type": "Actor", "img": "icons/Companion.png"}
	stranger := Document{"uuid": actorLimited, "id": "ActorLimited0001", "name": "Stranger", "type": "Actor", "img": "icons/Stranger.png"}
	sidekicks := func(entities ...any) Document {
		return Document{"id": subFolder, "uuid": "Folder." + subFolder, "name": "Sidekicks", "type": "Actor",
			"parentFolder": heroesFolder, "folders": []any{}, "entities": append([]any{}, entities...)}
	}
	heroes := func(sub ...any) Document {
		return Document{"id": heroesFolder, "uuid": "Folder." + heroesFolder, "name": "Heroes", "type": "Actor",
			"parentFolder": nil, "folders": append([]any{}, sub...), "entities": []any{hero}}
	}

	gear := Document{"id": itemsFolder, "uuid": "Folder." + itemsFolder, "name": "Gear", "type": "Item", "parentFolder": nil, "folders": []any{},
		"entities": []any{Document{"uuid": ropeUUID, "id": "WorldItem0000001", "name": "Rope", "type": "Item", "img": "icons/rope.png"}}}

	tests := []struct {
		name string
		user *User
		p    StructureParams
		want Document
	}{
		{
			name: "recursive, as a player",
			user: alice,
			p:    StructureParams{Types: []string{"Actor"}, Recursive: true},
			want: Document{"folders": []any{heroes(sidekicks(companion))}, "entities": []any{stranger}},
		},
		{
			name: "one level",
			user: alice,
			p:    StructureParams{Types: []string{"Actor"}},
			want: Document{"folders": []any{heroes()}, "entities": []any{stranger}},
		},
		{
			name: "inside a folder",
			user: alice,
			p:    StructureParams{Path: "Folder." + heroesFolder, Recursive: true},
			want: Document{"folders": []any{sidekicks(companion)}, "entities": []any{hero}},
		},
		{
			name: "a folder with nothing visible is hidden",
			user: alice,
			p:    StructureParams{Types: []string{"Item"}},
			want: Document{"folders": []any{gear}, "entities": []any{}},
		},
		{
			name: "GMs see every folder",
			p:    StructureParams{Types: []string{"Item"}},
			want: Document{
				"folders": []any{gear, Document{"id": vaultFolder, "uuid": "Folder." + vaultFolder, "name": "Vault", "type": "Item", "parentFolder": nil, "folders": []any{},
					"entities": []any{Document{"uuid": secretItem, "id": "SecretItem000001", "name": "Secret Ring", "type": "Item", "img": nil}}}},
				"entities": []any{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tw.Structure(ctx, tt.user, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("structure (-want +got):\n%s", diff)
			}
		})
	}

	withData, err := tw.Structure(ctx, alice, StructureParams{Types: []string{"Actor"}, IncludeData: true})
	if err != nil {
		t.Fatal(err)
	}
	entities := structureEntities(withData)
	if entities[actorOwner]["system"] == nil || entities[actorOwner]["uuid"] != actorOwner {
		t.Errorf("owner entity with data = %v", entities[actorOwner])
	}
	if !cmp.Equal(entities[actorLimited], stranger) {
		t.Errorf("limited entity with data = %v, want the summary", entities[actorLimited])
	}

	errorTests := []struct {
		p    StructureParams
		kind error
		msg  string
	}{
		{StructureParams{Types: []string{"Potato"}}, ErrInvalid, "'types' must name document types among Actor, Item, Scene, JournalEntry, Macro, not Potato"},
		{StructureParams{Path: "Actors"}, ErrInvalid, "Invalid folder path: Actors"},
		{StructureParams{Path: "Folder.Missing000000001"}, ErrNotFound, "Folder not found: Folder.Missing000000001"},
		{StructureParams{Path: "Folder." + itemsFolder, Types: []string{"Actor"}}, ErrInvalid, "Folder type Item not included in requested types"},
		{StructureParams{Recursive: true, Depth: -1}, ErrInvalid, "'recursiveDepth' must be a positive number"},
	}
	for _, tt := range errorTests {
		_, err := tw.Structure(ctx, nil, tt.p)
		wantError(t, err, tt.kind, tt.msg)
	}
}

func TestFolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	_, err := tw.CreateFolder(ctx, alice, FolderParams{Name: "Mine", Type: "Actor"})
	wantError(t, err, ErrPermission, "User 'Alice' must be a GM to create folders")
	_, err = tw.DeleteFolder(ctx, alice, heroesFolder, true)
	wantError(t, err, ErrPermission, "User 'Alice' must be a GM to delete folders")

	got, err := tw.CreateFolder(ctx, nil, FolderParams{Name: "Minions", Type: "Actor", ParentID: heroesFolder, ID: "FolderMinions001"})
	want := Document{"id": "FolderMinions001", "uuid": "Folder.FolderMinions001", "name": "Minions", "type": "Actor", "parentFolder": heroesFolder}
	if err != nil || !cmp.Equal(got, want) {
		t.Fatalf("CreateFolder = %v, %v; want %v", got, err, want)
	}
	again, err := tw.CreateFolder(ctx, nil, FolderParams{Name: "Other", Type: "Item", ID: "FolderMinions001"})
	if err != nil || !cmp.Equal(again, want) {
		t.Errorf("CreateFolder with an existing id = %v, %v; want it unchanged", again, err)
	}
	_, err = tw.CreateFolder(ctx, nil, FolderParams{Name: "X", Type: "Actor", ParentID: "Missing000000001"})
	wantError(t, err, ErrNotFound, "Parent folder not found with ID: Missing000000001")
	_, err = tw.CreateFolder(ctx, nil, FolderParams{Name: "X", Type: "Item", ParentID: heroesFolder})
	wantError(t, err, ErrInvalid, "Folder "+heroesFolder+" holds Actor documents, not Item")
	_, err = tw.CreateFolder(ctx, nil, FolderParams{Name: "X", Type: "Combat"})
	wantError(t, err, ErrInvalid, "'folderType' must be one of Actor, Item, Scene, JournalEntry, Macro")

	_, err = tw.DeleteFolder(ctx, nil, heroesFolder, false)
	wantError(t, err, ErrFailedPrecondition, "Folder contains 1 entities. Use deleteAll=true to delete them or move them first.")
	if _, err := tw.Update(ctx, nil, actorOwner, Document{"folder": nil}); err != nil {
		t.Fatal(err)
	}
	_, err = tw.DeleteFolder(ctx, nil, heroesFolder, false)
	wantError(t, err, ErrFailedPrecondition, "Folder contains 2 child folders. Use deleteAll=true to delete them or move them first.")
	_, err = tw.DeleteFolder(ctx, nil, "Missing000000001", false)
	wantError(t, err, ErrNotFound, "Folder not found with ID: Missing000000001")

	res, err := tw.DeleteFolder(ctx, nil, heroesFolder, true)
	if want := (FolderDeletion{FolderID: heroesFolder, EntitiesDeleted: 1, FoldersDeleted: 2}); err != nil || res != want {
		t.Fatalf("DeleteFolder = %+v, %v; want %+v", res, err, want)
	}
	for _, uuid := range []string{"Folder." + heroesFolder, "Folder." + subFolder, "Folder.FolderMinions001", actorObserver} {
		if _, err := tw.Get(ctx, nil, uuid); err == nil {
			t.Errorf("%s survived", uuid)
		}
	}
	mustGet(t, tw, actorOwner)
	if n := len(tw.log.all()); n != 3 {
		t.Errorf("%d commits, want 3 (create, move, delete all at once)", n)
	}
}

func TestDeleteFolderDocumentMovesItsContentsUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	if err := tw.Delete(ctx, nil, "Folder."+heroesFolder); err != nil {
		t.Fatal(err)
	}
	if f := mustGet(t, tw, actorOwner)["folder"]; f != nil {
		t.Errorf("hero's folder = %v, want null", f)
	}
	if f := mustGet(t, tw, "Folder."+subFolder)["folder"]; f != nil {
		t.Errorf("sub-folder's parent = %v, want null", f)
	}
}

func TestCreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	got, err := tw.Create(ctx, nil, CreateParams{Type: "Item", Folder: itemsFolder, Data: Document{
		"_id": "Dropped000000001", "name": "Lantern", "_stats": Document{"createdTime": 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := Document{
		"_id": "NewId00000000001", "uuid": "Item.NewId00000000001", "name": "Lantern", "folder": itemsFolder,
		"effects": []any{}, "ownership": Document{"default": 0.0},
		"_stats": Document{"createdTime": float64(testEpoch.UnixMilli()), "modifiedTime": float64(testEpoch.UnixMilli())},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("created (-want +got):\n%s", diff)
	}

	kept, err := tw.Create(ctx, nil, CreateParams{Type: "Item", KeepID: true, Data: Document{"_id": "KeptId0000000001", "name": "Kept"}})
	if err != nil || kept["uuid"] != "Item.KeptId0000000001" {
		t.Errorf("Create with KeepID = %v, %v", kept, err)
	}
	effect, err := tw.Create(ctx, nil, CreateParams{Type: "ActiveEffect", ParentUUID: swordUUID, Data: Document{"name": "Sharp"}})
	if err != nil || effect["uuid"] != swordUUID+".ActiveEffect.NewId00000000002" {
		t.Errorf("Create on an embedded item = %v, %v", effect, err)
	}

	errorTests := []struct {
		p    CreateParams
		kind error
		msg  string
	}{
		{CreateParams{Data: Document{}}, ErrInvalid, "'entityType' is required"},
		{CreateParams{Type: "Potato", Data: Document{}}, ErrInvalid, "Invalid entity type: Potato"},
		{CreateParams{Type: "Actor"}, ErrInvalid, "'data' must be an object"},
		{CreateParams{Type: "Actor", Data: Document{"type": "npc"}}, ErrInvalid, "'name' must be a non-empty string"},
		{CreateParams{Type: "Token", Data: Document{}}, ErrInvalid, "Token documents can only be created inside a parent document"},
		{CreateParams{Type: "Token", ParentUUID: actorOwner, Data: Document{}}, ErrInvalid, "Actor documents cannot hold Token documents"},
		{CreateParams{Type: "Item", ParentUUID: "Actor.Missing000000001", Data: Document{"name": "x"}}, ErrNotFound, "Entity not found: Actor.Missing000000001"},
		{CreateParams{Type: "Item", KeepID: true, Data: Document{"_id": "KeptId0000000001", "name": "x"}}, ErrConflict, "Entity with ID 'KeptId0000000001' already exists"},
		{CreateParams{Type: "Item", KeepID: true, Data: Document{"_id": "bad id", "name": "x"}}, ErrInvalid, "'_id' must be 16 letters and digits"},
		{CreateParams{Type: "Actor", Folder: itemsFolder, Data: Document{"name": "x"}}, ErrInvalid, "Folder " + itemsFolder + " holds Item documents, not Actor"},
		{CreateParams{Type: "Actor", Folder: "Missing000000001", Data: Document{"name": "x"}}, ErrNotFound, "Folder not found with ID: Missing000000001"},
		{CreateParams{Type: "Combat", Folder: itemsFolder, Data: Document{}}, ErrInvalid, "'folder' does not apply to Combat documents"},
		{CreateParams{Type: "Actor", Data: Document{"name": "x", "items": "none"}}, ErrInvalid, "'items' must be an array of documents"},
		{CreateParams{Type: "Actor", Data: Document{"name": "x", "items": []any{Document{"_id": "Dup0000000000001", "name": "a"}, Document{"_id": "Dup0000000000001", "name": "b"}}}}, ErrInvalid, "Duplicate _id in 'items': Dup0000000000001"},
	}
	for _, tt := range errorTests {
		_, err := tw.Create(ctx, nil, tt.p)
		wantError(t, err, tt.kind, tt.msg)
	}
}

// TestModuleStructure checks the module's shape: folders keyed by name
// (by id when the name cannot serve), loose documents grouped by type,
// empty groups left out, and a tree already in that shape kept.
func TestModuleStructure(t *testing.T) {
	tree := Document{
		"folders": []any{
			Document{"id": "f1", "uuid": "Folder.f1", "name": "Heroes", "type": "Actor", "parentFolder": nil,
				"folders":  []any{Document{"id": "f3", "uuid": "Folder.f3", "name": "entities", "type": "Actor", "folders": []any{}, "entities": []any{}}},
				"entities": []any{Document{"uuid": "Actor.a1", "id": "a1", "name": "Aria", "type": "Actor"}}},
			Document{"id": "f2", "uuid": "Folder.f2", "name": "Heroes", "type": "Item", "folders": []any{}, "entities": []any{}},
		},
		"entities": []any{
			Document{"uuid": "Actor.a2", "id": "a2", "name": "Brom", "type": "Actor"},
			Document{"uuid": "JournalEntry.j1", "id": "j1", "name": "Notes", "type": "base"},
		},
	}
	got := ModuleStructure(tree, false)
	folders := got["folders"].(Document)
	heroes := folders["Heroes"].(Document)
	if heroes["id"] != "f1" || folders["f2"] == nil || heroes["f3"] == nil || len(heroes["entities"].([]any)) != 1 {
		t.Fatalf("folders %v", folders)
	}
	if _, ok := heroes["f3"].(Document)["entities"]; ok {
		t.Errorf("an empty entities list is kept: %v", heroes["f3"])
	}
	groups := got["entities"].(Document)
	if len(groups["actors"].([]any)) != 1 || len(groups["journalentrys"].([]any)) != 1 || len(groups) != 2 {
		t.Fatalf("entities %v", groups)
	}
	if again := ModuleStructure(got, false); again["folders"].(Document)["Heroes"] == nil {
		t.Fatalf("a tree in the module's shape was changed: %v", again)
	}
	inFolder := ModuleStructure(Document{"folders": []any{}, "entities": tree["entities"]}, true)
	if _, ok := inFolder["folders"]; ok || len(inFolder["entities"].([]any)) != 2 {
		t.Fatalf("in a folder: %v", inFolder)
	}
}
