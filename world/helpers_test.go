package world

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The test world: a GM, two players (Alice and Bob), one actor per
// permission level for Alice, items, folders, an active scene with a linked
// and an unlinked token, and a combat.
const (
	gmID     = "GMuser0000000001"
	aliceID  = "Player0000000001"
	bobID    = "Player0000000002"
	assistID = "Assist0000000001"

	actorNone     = "Actor.ActorNone0000001"
	actorLimited  = "Actor.ActorLimited0001"
	actorObserver = "Actor.ActorObserver001"
	actorOwner    = "Actor.ActorOwner000001"
	actorBob      = "Actor.ActorBob00000001"

	swordUUID  = actorOwner + ".Item.ItemSword0000001"
	potionUUID = actorOwner + ".Item.ItemPotion000001"
	ropeUUID   = "Item.WorldItem0000001"
	secretItem = "Item.SecretItem000001"

	heroesFolder = "FolderActors0001"
	subFolder    = "FolderSub0000001"
	itemsFolder  = "FolderItems00001"
	vaultFolder  = "FolderVault00001"

	sceneUUID   = "Scene.Scene00000000001"
	tokenOwner  = sceneUUID + ".Token.TokenOwner000001"
	tokenGoblin = sceneUUID + ".Token.TokenGoblin00001"
	combatUUID  = "Combat.Combat0000000001"
)

// testEpoch is the fixed time of the test clock.
var testEpoch = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

func actor(id, name string, ownership Document, extra Document) Document {
	d := Document{
		"_id": id, "name": name, "type": "character", "img": "icons/" + name + ".png",
		"system":    Document{"attributes": Document{"hp": Document{"value": 10.0, "max": 10.0}}},
		"ownership": ownership, "folder": nil, "sort": 0.0,
		"items": []any{}, "effects": []any{}, "flags": Document{},
	}
	for k, v := range extra {
		d[k] = v
	}
	return d
}

func testSeed() Seed {
	return Seed{
		Title:  "Test World",
		System: "dnd5e",
		Permissions: map[string]Role{
			"ACTOR_CREATE":    RolePlayer,
			"FILES_BROWSE":    RolePlayer,
			"FILES_UPLOAD":    RoleTrusted,
			"SETTINGS_MODIFY": RoleGamemaster,
		},
		Users: []Document{
			{"_id": gmID, "name": "Game Master", "role": 4},
			{"_id": aliceID, "name": "Alice", "role": 1},
			{"_id": bobID, "name": "Bob", "role": 1},
			{"_id": assistID, "name": "Helper", "role": 3},
		},
		Folders: []Document{
			{"_id": heroesFolder, "name": "Heroes", "type": "Actor", "folder": nil, "sort": 0},
			{"_id": subFolder, "name": "Sidekicks", "type": "Actor", "folder": heroesFolder, "sort": 0},
			{"_id": itemsFolder, "name": "Gear", "type": "Item", "folder": nil, "sort": 0},
			{"_id": vaultFolder, "name": "Vault", "type": "Item", "folder": nil, "sort": 0},
		},
		Actors: []Document{
			actor("ActorNone0000001", "Goblin", Document{"default": 0}, nil),
			actor("ActorLimited0001", "Stranger", Document{"default": 1}, nil),
			actor("ActorObserver001", "Companion", Document{"default": 0, aliceID: 2}, Document{"folder": subFolder}),
			actor("ActorOwner000001", "Hero", Document{"default": 0, aliceID: 3}, Document{
				"folder": heroesFolder,
				"items": []any{
					Document{"_id": "ItemSword0000001", "name": "Sword", "type": "weapon", "system": Document{"quantity": 1}},
					Document{"_id": "ItemPotion000001", "name": "Potion", "type": "consumable", "system": Document{"quantity": 3}},
				},
			}),
			actor("ActorBob00000001", "Bobby", Document{"default": 0, bobID: 3}, Document{
				"items": []any{
					Document{"_id": "ItemPotion000002", "name": "Potion", "type": "consumable", "system": Document{"quantity": 1}},
				},
			}),
		},
		Items: []Document{
			{"_id": "WorldItem0000001", "name": "Rope", "type": "loot", "img": "icons/rope.png", "folder": itemsFolder,
				"system": Document{"quantity": 1}, "ownership": Document{"default": 2}},
			{"_id": "SecretItem000001", "name": "Secret Ring", "type": "equipment", "folder": vaultFolder, "system": Document{}, "ownership": Document{"default": 0}},
		},
		Scenes: []Document{{
			"_id": "Scene00000000001", "name": "Cave", "active": true, "ownership": Document{"default": 2},
			"tokens": []any{
				Document{"_id": "TokenOwner000001", "name": "Hero", "actorId": "ActorOwner000001", "actorLink": true, "x": 100, "y": 100},
				Document{"_id": "TokenGoblin00001", "name": "Goblin", "actorId": "ActorNone0000001", "actorLink": false, "x": 200, "y": 100, "delta": Document{}},
			},
		}},
		Combats: []Document{{
			"_id": "Combat0000000001", "round": 1, "active": true,
			"combatants": []any{
				Document{"_id": "Combatant0000001", "actorId": "ActorOwner000001", "tokenId": "TokenOwner000001", "sceneId": "Scene00000000001", "defeated": false},
				Document{"_id": "Combatant0000002", "actorId": "ActorNone0000001", "tokenId": "TokenGoblin00001", "sceneId": "Scene00000000001", "defeated": false},
			},
		}},
	}
}

// testOptions returns options with a fixed clock and numbered ids.
func testOptions() Options {
	var n atomic.Int64
	return Options{
		Clock: func() time.Time { return testEpoch },
		NewID: func() string { return fmt.Sprintf("NewId%011d", n.Add(1)) },
	}
}

// commitLog records what OnCommit receives.
type commitLog struct {
	mu      sync.Mutex
	batches [][]Change
}

func (l *commitLog) record(changes []Change) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batches = append(l.batches, changes)
}

func (l *commitLog) all() [][]Change {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([][]Change(nil), l.batches...)
}

// testWorld is a world created from testSeed in a temporary directory.
type testWorld struct {
	*Engine
	host *Host
	dir  string
	log  *commitLog
}

func newTestWorld(t testing.TB) *testWorld {
	t.Helper()
	return newTestWorldAt(t, t.TempDir(), testSeed())
}

func newTestWorldAt(t testing.TB, dir string, seed Seed) *testWorld {
	t.Helper()
	log := &commitLog{}
	opts := testOptions()
	opts.OnCommit = log.record
	h, err := OpenHost(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := h.Create(context.Background(), "test", seed)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return &testWorld{Engine: w, host: h, dir: dir, log: log}
}

// reopen closes the host and opens the world again from disk.
func (tw *testWorld) reopen(t *testing.T) *Engine {
	t.Helper()
	if err := tw.host.Close(); err != nil {
		t.Fatal(err)
	}
	return reopenAt(t, tw.dir)
}

func (tw *testWorld) user(t *testing.T, idOrName string) *User {
	t.Helper()
	u, err := tw.ResolveUser(context.Background(), idOrName)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// mustGet reads a document with GM rights.
func mustGet(t *testing.T, w Documents, uuid string) Document {
	t.Helper()
	d, err := w.Get(context.Background(), nil, uuid)
	if err != nil {
		t.Fatalf("Get(%s): %v", uuid, err)
	}
	return d
}

// wantError checks an error's kind and exact message.
func wantError(t *testing.T, err error, kind error, msg string) {
	t.Helper()
	var we *Error
	if !errors.As(err, &we) {
		t.Fatalf("error = %v (%T), want a *world.Error %q", err, err, msg)
	}
	if !errors.Is(err, kind) || (msg != "" && we.Msg != msg) {
		t.Fatalf("error = %v: %q, want %v: %q", we.Kind, we.Msg, kind, msg)
	}
}

func num(t *testing.T, doc Document, path string) float64 {
	t.Helper()
	v, ok := Property(doc, path)
	if !ok {
		t.Fatalf("%s missing in %v", path, doc)
	}
	f, ok := v.(float64)
	if !ok {
		t.Fatalf("%s = %#v, not a number", path, v)
	}
	return f
}
