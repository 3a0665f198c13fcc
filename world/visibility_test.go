package world

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// TestFolderVisibility: a non-GM sees a folder without an `ownership` of
// its own only when something in it is visible to them, and one with an
// `ownership` by it; a single read, a structure path and the structure
// listing agree.
func TestFolderVisibility(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, "Alice")
	vault, gear := "Folder."+vaultFolder, "Folder."+itemsFolder

	// The Vault holds only the Secret Ring (NONE to Alice).
	_, err := tw.Get(ctx, alice, vault)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	_, err = tw.GetJSON(ctx, alice, vault)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	_, err = tw.Structure(ctx, alice, StructureParams{Path: vault})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	if st, err := tw.Structure(ctx, alice, StructureParams{Recursive: true}); err != nil || strings.Contains(mustJSON(t, st), "Vault") {
		t.Fatalf("structure shows the Vault to Alice: %v", err)
	}
	if got, err := tw.Get(ctx, alice, gear); err != nil || !reflect.DeepEqual(got, Document{"name": "Gear", "uuid": gear, "type": "Folder", "img": nil}) {
		t.Fatalf("Gear (holding a visible rope) = %v, %v", got, err)
	}
	if _, err := tw.Get(ctx, nil, vault); err != nil {
		t.Fatalf("the GM cannot read the Vault: %v", err)
	}
	if v := tw.view(); v.CanSee(alice, vault) || !v.CanSee(alice, gear) || !v.CanSee(nil, vault) {
		t.Fatal("CanSee disagrees with Get")
	}

	// An ownership of its own decides, whatever the folder holds.
	gm := tw.user(t, "Game Master")
	if _, err := tw.Update(ctx, gm, vault, Document{"ownership": Document{"default": 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Update(ctx, gm, gear, Document{"ownership": Document{"default": 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Get(ctx, alice, vault); err != nil {
		t.Fatalf("a Vault LIMITED to players: %v", err)
	}
	_, err = tw.Get(ctx, alice, gear)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	st, err := tw.Structure(ctx, alice, StructureParams{Recursive: true, Types: []string{"Item"}})
	if err != nil {
		t.Fatal(err)
	}
	if s := mustJSON(t, st); !strings.Contains(s, "Vault") || strings.Contains(s, "Gear") {
		t.Fatalf("structure = %s, want the Vault and not Gear", s)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := EncodeJSON(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// TestOwnersCannotChangeTypeOwnershipOrHideInFolders: owning a document
// lets a player change it, but not its `type` or `ownership` (in any
// form, through every write), and not into a folder they cannot see; each
// refusal changes nothing.
func TestOwnersCannotChangeTypeOwnershipOrHideInFolders(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice, gm := tw.user(t, "Alice"), tw.user(t, "Game Master")
	crypt, err := tw.CreateFolder(ctx, gm, FolderParams{Name: "Crypt", Type: "Actor"}) // empty: invisible to players
	if err != nil {
		t.Fatal(err)
	}
	cryptID := crypt["id"].(string)
	before := mustGet(t, tw, actorOwner)
	unchanged := func() {
		t.Helper()
		if after := mustGet(t, tw, actorOwner); !reflect.DeepEqual(after, before) {
			t.Fatalf("a refused write changed the actor:\n%v\n%v", before, after)
		}
	}

	for _, tc := range []struct {
		uuid string
		diff Document
		kind error
		msg  string
	}{
		{actorOwner, Document{"type": "npc"}, ErrPermission, "User 'Alice' does not have permission to change the type of 'Hero'"},
		{actorOwner, Document{"-=type": nil}, ErrPermission, "User 'Alice' does not have permission to change the type of 'Hero'"},
		{swordUUID, Document{"type": "spell"}, ErrPermission, "User 'Alice' does not have permission to change the type of 'Sword'"},
		{actorOwner, Document{"==ownership": Document{"default": 3}}, ErrPermission, "User 'Alice' does not have permission to change the ownership of 'Hero'"},
		{actorOwner, Document{"ownership.default": 3}, ErrPermission, "User 'Alice' does not have permission to change the ownership of 'Hero'"},
		{swordUUID, Document{"ownership": Document{bobID: 3}}, ErrPermission, "User 'Alice' does not have permission to change the ownership of 'Sword'"},
		{actorOwner, Document{"folder": cryptID}, ErrNotFound, "Folder not found with ID: " + cryptID},
		{actorOwner, Document{"folder": "NoSuchFolder0001"}, ErrNotFound, "Folder not found with ID: NoSuchFolder0001"},
		{actorOwner, Document{"folder": itemsFolder}, ErrInvalid, "Folder " + itemsFolder + " holds Item documents, not Actor"},
		{actorOwner, Document{"folder": 7}, ErrInvalid, "'folder' must be a folder id or null"},
	} {
		_, err := tw.Update(ctx, alice, tc.uuid, tc.diff)
		wantError(t, err, tc.kind, tc.msg)
	}
	for _, attr := range []string{"ownership.default", "ownership." + aliceID, "ownership." + bobID} {
		_, err := tw.ModifyAttribute(ctx, alice, actorOwner, attr, 1)
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to change the ownership of 'Hero'")
	}
	unchanged()

	// Creating: not inside a folder she cannot see, by parameter or data.
	for _, p := range []CreateParams{
		{Type: "Actor", Folder: cryptID, Data: Document{"name": "Lurker", "type": "npc"}},
		{Type: "Actor", Data: Document{"name": "Lurker", "type": "npc", "folder": cryptID}},
	} {
		_, err := tw.Create(ctx, alice, p)
		wantError(t, err, ErrNotFound, "Folder not found with ID: "+cryptID)
	}
	if created, err := tw.Create(ctx, alice, CreateParams{Type: "Actor", Folder: subFolder, Data: Document{"name": "Sidekick", "type": "npc"}}); err != nil || created["folder"] != subFolder {
		t.Fatalf("create in a visible folder: %v %v", created, err)
	}

	// What stays allowed: the same type again, a folder she sees, the
	// root; and for a GM, any folder.
	if _, err := tw.Update(ctx, alice, actorOwner, Document{"type": "character", "folder": subFolder}); err != nil {
		t.Fatalf("owner moving into a visible folder: %v", err)
	}
	if _, err := tw.Update(ctx, alice, actorOwner, Document{"folder": nil}); err != nil {
		t.Fatalf("owner moving to the root: %v", err)
	}
	if _, err := tw.Update(ctx, gm, actorOwner, Document{"folder": cryptID, "type": "npc"}); err != nil {
		t.Fatalf("GM: %v", err)
	}
	if _, err := tw.ModifyAttribute(ctx, gm, actorOwner, "ownership.default", 1); err != nil {
		t.Fatalf("GM: %v", err)
	}
}

// TestWriteRefusalsNameOnlyWhatTheUserSees: a refused write names the
// document only to a user who may see its name.
func TestWriteRefusalsNameOnlyWhatTheUserSees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, "Alice")
	for uuid, want := range map[string]string{
		actorNone:                            actorNone,
		actorLimited:                         "Stranger",
		actorObserver:                        "Companion",
		"Folder." + vaultFolder:              "Folder." + vaultFolder,
		actorNone + ".Item.Nope000000000001": actorNone + ".Item.Nope000000000001",
	} {
		_, err := tw.Update(ctx, alice, uuid, Document{"name": "Mine"})
		if strings.HasPrefix(want, actorNone+".Item") {
			wantError(t, err, ErrNotFound, "Entity not found: "+want)
			continue
		}
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to update '"+want+"'")
		err = tw.Delete(ctx, alice, uuid)
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to delete '"+want+"'")
	}
}
