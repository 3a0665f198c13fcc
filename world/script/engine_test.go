package script_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/script"
)

// The script API against the real world engine.
func TestAgainstEngine(t *testing.T) {
	ctx := context.Background()
	host, err := world.OpenHost(t.TempDir(), world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	w, err := host.Create(ctx, "script-test", world.Seed{
		Title:  "Script Test",
		System: "dnd5e",
		Users:  []world.Document{{"_id": "gm00000000000001", "name": "Gamemaster", "role": 4.0}},
		Actors: []world.Document{{"_id": "Goblin0000000001", "name": "Goblin", "type": "npc",
			"system": world.Document{"attributes": world.Document{"hp": world.Document{"value": 3.0, "max": 7.0}}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	user, err := w.ResolveUser(ctx, "Gamemaster")
	if err != nil {
		t.Fatal(err)
	}

	res, err := script.Run(ctx, w, user, `
		const hits = await game.search("gob");
		const goblin = await game.get(hits[0].uuid);
		const updated = await game.update(goblin.uuid ?? hits[0].uuid, {"system.attributes.hp.value": goblin.system.attributes.hp.max});
		const orc = await game.create("Actor", {name: "Orc", type: "npc"});
		let missing;
		try { await game.get("Actor.Nobody0000000001"); } catch (e) { missing = e.kind; }
		return {
			world: game.world.title,
			hits: hits.length,
			hp: updated.system.attributes.hp.value,
			orc: orc.name,
			missing,
			users: (await game.users()).map((u) => u.name),
		};`, script.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"world": "Script Test", "hits": 1.0, "hp": 7.0, "orc": "Orc", "missing": "not found",
		"users": []any{"Gamemaster"},
	}
	if !reflect.DeepEqual(res.Value, want) {
		t.Errorf("got %#v\nwant %#v", res.Value, want)
	}

	doc, err := w.Get(ctx, nil, "Actor.Goblin0000000001")
	if err != nil {
		t.Fatal(err)
	}
	if hp, _ := world.Property(doc, "system.attributes.hp.value"); hp != 7.0 {
		t.Errorf("hp in the world = %v, want 7", hp)
	}

	_, err = script.Run(ctx, w, user, `await game.delete("Actor.Nobody0000000001")`, script.Options{})
	if !errors.Is(err, world.ErrInvalid) || err.Error() == "" {
		t.Errorf("uncaught world error: %v", err)
	}
}
