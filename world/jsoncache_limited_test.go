package world_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// TestGetJSONLimitedFollowsChanges: what a LIMITED reader gets comes from
// the cache after the first read and follows every change of the document,
// whichever class of reader read it first.
func TestGetJSONLimitedFollowsChanges(t *testing.T) {
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
	read := func(user *world.User, uuid string) map[string]any {
		t.Helper()
		raw, err := w.GetJSON(ctx, user, uuid)
		if err != nil {
			t.Fatalf("%s: %v", uuid, err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	// The demo's town guard is LIMITED to Alice.
	const guard = "Actor.townGuard0000001"
	if m := read(alice, guard); len(m) != 4 || m["uuid"] != guard || m["type"] != "Actor" {
		t.Fatalf("Alice's view of the guard is not the LIMITED one: %v", m)
	}
	for i, name := range []string{"Guard One", "Guard Two", "Guard Three"} {
		if _, err := w.Update(ctx, nil, guard, world.Document{"name": name}); err != nil {
			t.Fatal(err)
		}
		// Alternate which class reads the new version first.
		if i%2 == 0 {
			if m := read(nil, guard); m["name"] != name || len(m) <= 4 {
				t.Fatalf("GM after rename %d: %v", i, m["name"])
			}
		}
		for range 2 {
			if m := read(alice, guard); m["name"] != name || len(m) != 4 {
				t.Fatalf("Alice after rename %d: %v", i, m)
			}
		}
		if m := read(nil, guard); m["name"] != name || len(m) <= 4 {
			t.Fatalf("GM after rename %d: %v", i, m["name"])
		}
	}
}
