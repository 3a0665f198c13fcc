package link_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
)

// TestLinkedWorldThroughRelay runs the link package on a whole relay
// (package relaytest): a simulated tabletop pairs with a code made over
// REST, connects to the relay's /relay, and answers a REST read of one of
// its documents, which reaches the client in the relay's envelope; a
// document the tabletop does not have is 404.
func TestLinkedWorldThroughRelay(t *testing.T) {
	t.Parallel()
	r := relaytest.Start(t)
	ctx := context.Background()

	pair := r.Do(http.MethodPost, "/pairing-codes", r.AdminKey, nil, map[string]any{})
	if pair.Status != http.StatusOK {
		t.Fatalf("POST /pairing-codes: %d %s", pair.Status, pair.Body)
	}
	code, _ := pair.Data(t)["code"].(string)
	tt := linktest.New(linktest.Config{RelayURL: r.Base, WorldID: "harbour", WorldTitle: "Harbour",
		FoundryVersion: "13.345", SystemID: "dnd5e", SystemVersion: "5.0.4", ServerFingerprint: "fp-relaytest",
		Players: []link.Player{{ID: "gm000000000000001", Name: "Gamemaster", Role: world.RoleGamemaster, Active: true}},
		Handler: func(_ context.Context, req linktest.Request) (any, bool) {
			var p map[string]any
			_ = req.Params(&p)
			if req.Type != "entity" {
				return nil, false
			}
			if p["uuid"] != "Actor.captain" {
				return map[string]any{"uuid": p["uuid"], "error": "Entity not found", "data": nil}, true
			}
			return map[string]any{"uuid": p["uuid"], "data": map[string]any{"_id": "captain", "name": "Captain", "type": "npc"}}, true
		}})
	if _, err := tt.Pair(ctx, code); err != nil {
		t.Fatalf("pair: %v", err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	// The world's users arrive after the connection; a read acting as a
	// user waits for them.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if info, _ := r.Links().Hub().Info(clientID); len(info.Players) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the linked world's players never arrived")
		}
		time.Sleep(10 * time.Millisecond)
	}

	got := r.Do(http.MethodGet, "/get", r.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.captain", "userId", "Gamemaster"), nil)
	if got.Status != http.StatusOK || got.JSON(t)["type"] != "entity-result" || got.Data(t)["name"] != "Captain" {
		t.Fatalf("GET /get: %d %s", got.Status, got.Body)
	}
	missing := r.Do(http.MethodGet, "/get", r.AdminKey, relaytest.Q("clientId", clientID, "uuid", "Actor.nobody", "userId", "Gamemaster"), nil)
	if missing.Status != http.StatusNotFound || missing.ErrorText(t) == "" {
		t.Fatalf("GET /get of a missing document: %d %s", missing.Status, missing.Body)
	}
}
