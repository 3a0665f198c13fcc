package world

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// allDocs returns every top-level document of an engine by uuid.
func allDocs(e *Engine) map[string]Document {
	out := map[string]Document{}
	for t, docs := range e.snap.Load().docs {
		docs.each(func(id string, d Document) bool {
			out[t.name+"."+id] = d
			return true
		})
	}
	return out
}

func TestPersistenceAcrossReopen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	if _, err := tw.Update(ctx, alice, actorOwner, Document{"system.attributes.hp.value": 4, "flags.note": "<b>&</b>"}); err != nil {
		t.Fatal(err)
	}
	created, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Folder: heroesFolder, Data: Document{
		"name": "Wizard", "type": "character",
		"items": []any{Document{"name": "Staff", "type": "weapon"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Delete(ctx, nil, potionUUID); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.CreateFolder(ctx, nil, FolderParams{Name: "Villains", Type: "Actor"}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Kill(ctx, nil, actorNone); err != nil {
		t.Fatal(err)
	}
	want := allDocs(tw.Engine)

	reopened := tw.reopen(t)
	if diff := cmp.Diff(want, allDocs(reopened)); diff != "" {
		t.Errorf("documents after reopening (-before +after):\n%s", diff)
	}
	if got := reopened.Info(); got != (Info{ClientID: "test", Title: "Test World", System: "dnd5e"}) {
		t.Errorf("Info = %+v", got)
	}
	if u, err := reopened.ResolveUser(ctx, "ALICE"); err != nil || u.ID != aliceID {
		t.Errorf("ResolveUser after reopening = %v, %v", u, err)
	}
	if !reopened.Can(alice, PermissionFilesBrowse) || reopened.Can(alice, PermissionFilesUpload) {
		t.Error("world permissions lost on reopening")
	}
	staff := mustGet(t, reopened, created["uuid"].(string))["items"].([]any)[0].(Document)
	if staff["name"] != "Staff" || !validID(staff["_id"].(string)) {
		t.Errorf("embedded item after reopening = %v", staff)
	}
}

func TestStoreSettings(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	var mode string
	var sync, fk int
	db := tw.store.db
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("PRAGMA synchronous").Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRow("PRAGMA foreign_keys").Scan(&fk); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 || fk != 1 {
		t.Errorf("journal_mode=%s synchronous=%d foreign_keys=%d; want wal, 2 (FULL), 1", mode, sync, fk)
	}
}

func TestFailedOperationChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	before := allDocs(tw.Engine)

	// Alice owns the source but not the target: the give fails as a whole.
	_, err := tw.Give(ctx, alice, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: potionUUID, Quantity: 1})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to give items to 'Actor.ActorBob00000001'")

	// A transaction that fails after changing two documents leaves both.
	err = tw.Mutate(ctx, func(tx *Tx) error {
		if _, err := tx.Update(actorOwner, Document{"name": "Changed"}); err != nil {
			return err
		}
		if err := tx.Delete(swordUUID); err != nil {
			return err
		}
		if _, err := tx.Create("Item", actorBob, Document{"name": "Loot"}); err != nil {
			return err
		}
		_, err := tx.Update("Actor.Missing000000001", Document{"name": "x"})
		return err
	})
	wantError(t, err, ErrNotFound, "Entity not found: Actor.Missing000000001")

	// A panic in a transaction leaves nothing behind either, not even the lock.
	func() {
		defer func() { recover() }()
		tw.Mutate(ctx, func(tx *Tx) error {
			tx.Delete(actorOwner)
			panic("boom")
		})
	}()

	if diff := cmp.Diff(before, allDocs(tw.Engine)); diff != "" {
		t.Errorf("memory changed (-before +after):\n%s", diff)
	}
	if n := len(tw.log.all()); n != 0 {
		t.Errorf("OnCommit called %d times", n)
	}
	if diff := cmp.Diff(before, allDocs(tw.reopen(t))); diff != "" {
		t.Errorf("disk changed (-before +after):\n%s", diff)
	}
}

func TestStoreFailureChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	before := allDocs(tw.Engine)
	tw.store.db.Close() // every write now fails

	_, err := tw.Update(ctx, nil, actorOwner, Document{"name": "Lost"})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Update with a broken store: %v, want ErrUnavailable", err)
	}
	if diff := cmp.Diff(before, allDocs(tw.Engine)); diff != "" {
		t.Errorf("memory changed although the commit failed:\n%s", diff)
	}
	if n := len(tw.log.all()); n != 0 {
		t.Errorf("OnCommit called %d times", n)
	}
}

func TestConcurrentWritesLoseNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	const writers = 40

	var wg sync.WaitGroup
	errs := make(chan error, 4*writers)
	for i := range writers {
		wg.Add(4)
		go func() { // the same number, from many writers
			defer wg.Done()
			_, err := tw.ModifyAttribute(ctx, alice, actorOwner, "system.attributes.hp.value", 1)
			errs <- err
		}()
		go func() { // different keys of the same document
			defer wg.Done()
			_, err := tw.Update(ctx, nil, actorOwner, Document{fmt.Sprintf("flags.w%d", i): i})
			errs <- err
		}()
		go func() { // new embedded documents
			defer wg.Done()
			_, err := tw.Create(ctx, nil, CreateParams{Type: "Item", ParentUUID: actorBob, Data: Document{"name": fmt.Sprint("Gem ", i)}})
			errs <- err
		}()
		go func() { // readers
			defer wg.Done()
			if _, err := tw.Get(ctx, alice, actorOwner); err != nil {
				errs <- err
				return
			}
			_, err := tw.Search(ctx, alice, SearchParams{Query: "h"})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	hero := mustGet(t, tw, actorOwner)
	if got := num(t, hero, "system.attributes.hp.value"); got != 10+writers {
		t.Errorf("hp = %v, want %d", got, 10+writers)
	}
	if got := len(hero["flags"].(Document)); got != writers {
		t.Errorf("%d flags, want %d", got, writers)
	}
	if got := len(mustGet(t, tw, actorBob)["items"].([]any)); got != 1+writers {
		t.Errorf("%d items, want %d", got, 1+writers)
	}
	if got := len(tw.log.all()); got != 3*writers {
		t.Errorf("%d commits, want %d", got, 3*writers)
	}
	if diff := cmp.Diff(allDocs(tw.Engine), allDocs(tw.reopen(t))); diff != "" {
		t.Errorf("disk differs from memory:\n%s", diff)
	}
}

// changeSummary is the gist of a Change, for comparisons.
type changeSummary struct {
	Op   ChangeOp
	UUID string
	Name string
}

func summarize(changes []Change) []changeSummary {
	out := make([]changeSummary, len(changes))
	for i, c := range changes {
		out[i] = changeSummary{c.Op, c.UUID, c.DocumentName}
	}
	return out
}

func TestOnCommitChanges(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)

	if _, err := tw.Update(ctx, nil, swordUUID, Document{"name": "Blade"}); err != nil {
		t.Fatal(err)
	}
	created, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{
		"name": "Wizard", "items": []any{Document{"name": "Staff", "effects": []any{Document{"name": "Glow"}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	wizard := created["uuid"].(string)
	if err := tw.Delete(ctx, nil, wizard); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Kill(ctx, nil, actorOwner); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Kill(ctx, nil, actorOwner); err != nil { // changes nothing: no commit
		t.Fatal(err)
	}

	staff := wizard + ".Item.NewId00000000002"
	glow := staff + ".ActiveEffect.NewId00000000003"
	want := [][]changeSummary{
		{{ChangeUpdate, actorOwner, "Actor"}, {ChangeUpdate, swordUUID, "Item"}},
		{{ChangeCreate, wizard, "Actor"}, {ChangeCreate, staff, "Item"}, {ChangeCreate, glow, "ActiveEffect"}},
		{{ChangeDelete, wizard, "Actor"}, {ChangeDelete, staff, "Item"}, {ChangeDelete, glow, "ActiveEffect"}},
		{
			{ChangeUpdate, actorOwner, "Actor"},
			{ChangeCreate, actorOwner + ".ActiveEffect.NewId00000000004", "ActiveEffect"},
			{ChangeUpdate, combatUUID, "Combat"},
			{ChangeUpdate, combatUUID + ".Combatant.Combatant0000001", "Combatant"},
		},
	}
	batches := tw.log.all()
	var got [][]changeSummary
	for _, b := range batches {
		got = append(got, summarize(b))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	first := batches[0][1]
	if first.Before["name"] != "Sword" || first.After["name"] != "Blade" {
		t.Errorf("item change Before/After = %v / %v", first.Before, first.After)
	}
	if batches[1][0].Before != nil || batches[2][0].After != nil {
		t.Error("a creation has a Before or a deletion an After")
	}
}

func TestTxPutAndGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	err := tw.Mutate(ctx, func(tx *Tx) error {
		hero, err := tx.Get(actorOwner)
		if err != nil {
			return err
		}
		hero["name"] = "Renamed"
		hero["uuid"] = "dropped"
		items := hero["items"].([]any)
		hero["items"] = append(items, Document{"name": "Shield"})
		if err := tx.Put(actorOwner, hero); err != nil {
			return err
		}
		// The copy from Get is ours: changing it after Put changes nothing.
		hero["name"] = "Not stored"
		// Reads inside the transaction see its writes.
		if d, _ := tx.View().Get(actorOwner); d["name"] != "Renamed" {
			t.Errorf("the view inside the transaction sees %v", d["name"])
		}
		return tx.Put("Item.PutItem000000001", Document{"name": "Fresh", "_id": "ignored"})
	})
	if err != nil {
		t.Fatal(err)
	}
	hero := mustGet(t, tw, actorOwner)
	if hero["name"] != "Renamed" || len(hero["items"].([]any)) != 3 {
		t.Errorf("hero = %v", hero)
	}
	if _, ok := allDocs(tw.Engine)[actorOwner]["uuid"]; ok {
		t.Error("the uuid key was stored")
	}
	if item := mustGet(t, tw, "Item.PutItem000000001"); item["_id"] != "PutItem000000001" || item["effects"] == nil {
		t.Errorf("put item = %v", item)
	}
	batch := summarize(tw.log.all()[0])
	want := []changeSummary{
		{ChangeUpdate, actorOwner, "Actor"},
		{ChangeCreate, actorOwner + ".Item.NewId00000000001", "Item"},
		{ChangeCreate, "Item.PutItem000000001", "Item"},
	}
	if diff := cmp.Diff(want, batch); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestMutateAfterClose(t *testing.T) {
	t.Parallel()
	tw := newTestWorld(t)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	_, err := tw.Update(context.Background(), nil, actorOwner, Document{"name": "x"})
	wantError(t, err, ErrUnavailable, "World test is closed")
	_, err = tw.Get(context.Background(), nil, actorOwner)
	wantError(t, err, ErrUnavailable, "World test is closed")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tw2 := newTestWorld(t)
	err = tw2.Mutate(ctx, func(*Tx) error { return nil })
	wantError(t, err, ErrUnavailable, "The operation was canceled")
}

func BenchmarkGet(b *testing.B) {
	tw := newTestWorld(b)
	ctx := context.Background()
	alice, _ := tw.ResolveUser(ctx, aliceID)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tw.Get(ctx, alice, actorOwner); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSearch(b *testing.B) {
	tw := newTestWorld(b)
	ctx := context.Background()
	for i := range 1000 {
		if _, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": fmt.Sprint("Monster ", i)}}); err != nil {
			b.Fatal(err)
		}
	}
	alice, _ := tw.ResolveUser(ctx, aliceID)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tw.Search(ctx, alice, SearchParams{Query: "mon"}); err != nil {
			b.Fatal(err)
		}
	}
}
