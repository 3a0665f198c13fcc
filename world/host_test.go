package world

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHostCreateAndOpen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	h, err := OpenHost(dir, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	for _, id := range []string{"", "-leading", "has space", "../escape", string(make([]byte, 65))} {
		_, err := h.Create(ctx, id, testSeed())
		wantError(t, err, ErrInvalid, "Invalid world id '"+id+"': use 1 to 64 letters, digits, '_' or '-', starting with a letter or digit")
	}
	if _, err := h.Create(ctx, "alpha", testSeed()); err != nil {
		t.Fatal(err)
	}
	_, err = h.Create(ctx, "alpha", testSeed())
	wantError(t, err, ErrConflict, "World already exists: alpha")

	// A seed that fails half-way leaves no world behind.
	bad := testSeed()
	bad.Items = append(bad.Items, Document{"_id": "short", "name": "Broken"})
	_, err = h.Create(ctx, "beta", bad)
	wantError(t, err, ErrInvalid, "Seed items[2]: '_id' must be 16 letters and digits")
	_, err = h.World(ctx, "beta")
	wantError(t, err, ErrNotFound, "Unknown world: beta")
	if entries, _ := os.ReadDir(filepath.Join(dir, "worlds")); len(entries) != 1 {
		t.Errorf("worlds directory holds %d entries, want only alpha", len(entries))
	}
	_, err = h.World(ctx, "../alpha")
	wantError(t, err, ErrNotFound, "Unknown world: ../alpha")

	// Concurrent callers share one opening.
	gamma := testSeed()
	gamma.Title = "Gamma"
	if _, err := h.Create(ctx, "gamma", gamma); err != nil {
		t.Fatal(err)
	}
	h.Close()
	h2, err := OpenHost(dir, testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	var wg sync.WaitGroup
	worlds := make([]*Engine, 8)
	for i := range worlds {
		wg.Go(func() {
			w, err := h2.World(ctx, "gamma")
			if err != nil {
				t.Error(err)
			}
			worlds[i] = w
		})
	}
	wg.Wait()
	for _, w := range worlds[1:] {
		if w != worlds[0] {
			t.Fatal("concurrent World calls opened the world more than once")
		}
	}
	list, err := h2.List(ctx)
	want := []Info{{ClientID: "alpha", Title: "Test World", System: "dnd5e"}, {ClientID: "gamma", Title: "Gamma", System: "dnd5e"}}
	if err != nil || !cmp.Equal(list, want) {
		t.Errorf("List = %v, %v; want %v", list, err, want)
	}

	// Closing a world makes the host open it afresh next time.
	if err := worlds[0].Close(); err != nil {
		t.Fatal(err)
	}
	again, err := h2.World(ctx, "gamma")
	if err != nil || again == worlds[0] {
		t.Errorf("World after Close = %v, %v; want a new instance", again, err)
	}
	h2.Close()
	_, err = h2.World(ctx, "gamma")
	wantError(t, err, ErrUnavailable, "The world host is closed")
}

func TestHostRemovesUnfinishedWorlds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	leftover := filepath.Join(dir, "worlds", creatingPrefix+"crashed-123")
	if err := os.MkdirAll(leftover, 0o755); err != nil {
		t.Fatal(err)
	}
	h, err := OpenHost(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("the unfinished world is still there: %v", err)
	}
}

func TestHostWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, err := OpenHost(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var mu sync.Mutex
	var seen []string
	h.Watch(func(clientID string, changes []Change) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, clientID+":"+changes[0].UUID)
	})
	w, err := h.Create(ctx, "watched", testSeed())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Update(ctx, nil, actorOwner, Document{"name": "Seen"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"watched:" + actorOwner}; !cmp.Equal(seen, want) {
		t.Errorf("watched %v, want %v (the seed is not a change)", seen, want)
	}
}

func TestParseUUID(t *testing.T) {
	t.Parallel()
	valid := []string{
		actorOwner, swordUUID, swordUUID + ".ActiveEffect.Effect0000000001", actorOwner + ".ActiveEffect.Effect0000000001",
		ropeUUID, ropeUUID + ".ActiveEffect.Effect0000000001", sceneUUID, tokenOwner, "Folder." + heroesFolder,
		"JournalEntry.Journal000000001", "JournalEntry.Journal000000001.JournalEntryPage.Page000000000001",
		"Macro.Macro00000000001", combatUUID, combatUUID + ".Combatant.Combatant0000001", "User." + aliceID,
		"ChatMessage.Message000000001",
	}
	for _, u := range valid {
		if r, err := parseUUID(u); err != nil || r.uuid != u {
			t.Errorf("parseUUID(%q) = %v, %v", u, r, err)
		}
	}
	invalid := []string{
		"", "Actor", "Actor.", "Actor.ActorOwner000001.", "Actor.ActorOwner000001.Item", "Actor.ActorOwner000001.Item.",
		"Actor.short", "Actor.ActorOwner00000!", "Item.WorldItem0000001.Item.ItemSword0000001", "Token.TokenOwner000001",
		"Scene.Scene00000000001.Item.ItemSword0000001", "Actor..ActorOwner000001", "Compendium.dnd5e.items.Item.abc",
	}
	for _, u := range invalid {
		_, err := parseUUID(u)
		wantError(t, err, ErrInvalid, "Invalid uuid: "+u)
	}
	r, _ := parseUUID(swordUUID + ".ActiveEffect.Effect0000000001")
	if r.parent().uuid != swordUUID || r.parent().parent().uuid != actorOwner || r.typ() != typeActiveEffect {
		t.Errorf("parents of %s: %s, %s", r.uuid, r.parent().uuid, r.parent().parent().uuid)
	}
}

func TestRandomID(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		id := randomID()
		if !validID(id) || seen[id] {
			t.Fatalf("randomID() = %q (seen before: %v)", id, seen[id])
		}
		seen[id] = true
	}
}

func TestHostRefusesDamagedDocuments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	tw := newTestWorldAt(t, dir, testSeed())
	if err := tw.host.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := openStore(filepath.Join(dir, "worlds", "test", dbFile), false)
	if err != nil {
		t.Fatal(err)
	}
	err = st.write(ctx, []row{{collection: "Actor", id: "Broken0000000001", data: []byte(`{"_id":"Broken0000000001","name":"x","items":[{"name":"no id"}]}`)}}, nil)
	st.close()
	if err != nil {
		t.Fatal(err)
	}
	h, err := OpenHost(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, err = h.World(ctx, "test")
	// The caller learns that the world cannot be opened; the operator's
	// log gets why.
	wantError(t, err, ErrUnavailable, `World test could not be opened`)
	var werr *Error
	if errors.As(err, &werr); werr.Cause == nil || werr.Cause.Error() != `reading Actor.Broken0000000001: "items" holds a document without a unique, well-formed _id` {
		t.Fatalf("cause %v", werr.Cause)
	}
}
