package world_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// TestGetJSONMatchesGet: the cached JSON is always what Get returns, before
// and after changes, at every permission level.
func TestGetJSONMatchesGet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	host, err := world.OpenHost(t.TempDir(), world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	w, err := host.Create(ctx, "demo", seed)
	if err != nil {
		t.Fatal(err)
	}
	alice, err := w.ResolveUser(ctx, "Alice")
	if err != nil {
		t.Fatal(err)
	}
	same := func(user *world.User, uuid string) {
		t.Helper()
		doc, gerr := w.Get(ctx, user, uuid)
		raw, jerr := w.GetJSON(ctx, user, uuid)
		if (gerr == nil) != (jerr == nil) || (gerr != nil && gerr.Error() != jerr.Error()) {
			t.Fatalf("%s: Get error %v, GetJSON error %v", uuid, gerr, jerr)
		}
		if gerr != nil {
			return
		}
		var decoded map[string]any
		if err := json.Unmarshal(raw, &decoded); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(decoded, doc) {
			t.Fatalf("%s: GetJSON differs from Get", uuid)
		}
	}
	for _, uuid := range []string{"Actor.ariaVale00000001", "Actor.goblin0000000001", "Actor.townGuard0000001",
		"Actor.innkeeperMara001", "Actor.ariaVale00000001.Item.wandMagicMissile"} {
		for _, user := range []*world.User{nil, alice} {
			same(user, uuid)
			same(user, uuid) // the second read comes from the cache
		}
	}
	// A change is seen at once, embedded documents included.
	if _, err := w.Update(ctx, nil, "Actor.ariaVale00000001", world.Document{"system.attributes.hp.value": 3.0}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Update(ctx, nil, "Actor.ariaVale00000001.Item.wandMagicMissile", world.Document{"name": "Wand of Sparks"}); err != nil {
		t.Fatal(err)
	}
	same(nil, "Actor.ariaVale00000001")
	same(nil, "Actor.ariaVale00000001.Item.wandMagicMissile")
	raw, _ := w.GetJSON(ctx, nil, "Actor.ariaVale00000001.Item.wandMagicMissile")
	var item map[string]any
	_ = json.Unmarshal(raw, &item)
	if item["name"] != "Wand of Sparks" {
		t.Fatalf("stale embedded document: %v", item["name"])
	}
	// A deleted document is gone from the cache too.
	if err := w.Delete(ctx, nil, "Actor.innkeeperMara001"); err != nil {
		t.Fatal(err)
	}
	same(nil, "Actor.innkeeperMara001")
}
