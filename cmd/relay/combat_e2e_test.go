package main

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// Token uuids of the demo world's active scene.
const (
	ariaTokenUUID   = "Scene.tavernScene00001.Token.ariaToken0000001"
	bromTokenUUID   = "Scene.tavernScene00001.Token.bromToken0000001"
	goblinTokenUUID = "Scene.tavernScene00001.Token.goblinToken00001"
)

// combatNames lists an encounter's combatant names, in order.
func combatNames(enc map[string]any) []string {
	var out []string
	for _, c := range enc["combatants"].([]any) {
		out = append(out, c.(map[string]any)["name"].(string))
	}
	return out
}

// combatantID finds a combatant's id by name.
func combatantID(t *testing.T, enc map[string]any, name string) string {
	t.Helper()
	for _, c := range enc["combatants"].([]any) {
		if m := c.(map[string]any); m["name"] == name {
			return m["id"].(string)
		}
	}
	t.Fatalf("no combatant %s in %v", name, enc)
	return ""
}

// encounters lists the encounters as a user ("" for GM-level access).
func (tr *testRelay) encounters(t *testing.T, user string) []any {
	t.Helper()
	resp := tr.Do(http.MethodGet, "/encounters", tr.AdminKey, relaytest.Q("userId", user), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("encounters: %d %s", resp.Status, resp.Body)
	}
	return resp.Data(t)["encounters"].([]any)
}

// setInitiative sets a combatant's initiative through the document API.
func (tr *testRelay) setInitiative(t *testing.T, encounterID, combatantID string, value float64) {
	t.Helper()
	resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", "Combat."+encounterID+".Combatant."+combatantID), map[string]any{"data": map[string]any{"initiative": value}})
	if resp.Status != http.StatusOK {
		t.Fatalf("set initiative: %d %s", resp.Status, resp.Body)
	}
}

// TestCombatTurnOrder: start, ties broken by dexterity then name, defeated
// combatants skipped, rounds wrapping both ways, and the navigation
// aliases.
func TestCombatTurnOrder(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	resp := tr.Do(http.MethodPost, "/start-encounter", admin, nil, map[string]any{"name": "Tavern brawl", "tokenUuids": []string{bromTokenUUID, goblinTokenUUID, ariaTokenUUID}})
	if resp.Status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.Status, resp.Body)
	}
	data := resp.Data(t)
	id := data["encounterId"].(string)
	enc := data["encounter"].(map[string]any)
	if enc["id"] != id || enc["name"] != "Tavern brawl" || enc["round"] != 1.0 || enc["turn"] != 0.0 || enc["current"] != true || len(enc["combatants"].([]any)) != 3 {
		t.Fatalf("started: %s", resp.Body)
	}
	first := enc["combatants"].([]any)[0].(map[string]any)
	for _, k := range []string{"id", "name", "tokenUuid", "actorUuid", "img", "initiative", "hidden", "defeated"} {
		if _, ok := first[k]; !ok {
			t.Fatalf("combatant lacks %s: %v", k, first)
		}
	}
	if first["initiative"] != nil {
		t.Fatalf("initiative before rolling: %v", first["initiative"])
	}
	// Everyone at 12: the tabletop breaks ties by name, not by dexterity
	// (that takes the world setting dnd5e.initiativeDexTiebreaker).
	for _, name := range []string{"Aria Vale", "Brom Ironfist", "Goblin"} {
		tr.setInitiative(t, id, combatantID(t, enc, name), 12)
	}
	list := tr.encounters(t, "")
	enc = list[0].(map[string]any)
	if got := combatNames(enc); !slices.Equal(got, []string{"Aria Vale", "Brom Ironfist", "Goblin"}) {
		t.Fatalf("order %v", got)
	}
	// Brom at 11 goes last.
	tr.setInitiative(t, id, combatantID(t, enc, "Brom Ironfist"), 11)
	list = tr.encounters(t, "")
	enc = list[0].(map[string]any)
	if got := combatNames(enc); !slices.Equal(got, []string{"Aria Vale", "Goblin", "Brom Ironfist"}) {
		t.Fatalf("order %v", got)
	}
	// The goblin falls: it is skipped from now on.
	if resp := tr.Do(http.MethodPost, "/kill", admin, relaytest.Q("uuid", goblinTokenUUID), nil); resp.Status != http.StatusOK {
		t.Fatalf("kill: %d %s", resp.Status, resp.Body)
	}
	list = tr.encounters(t, "")
	if goblin := list[0].(map[string]any)["combatants"].([]any)[1].(map[string]any); goblin["defeated"] != true {
		t.Fatalf("goblin after kill: %v", goblin)
	}
	steps := []struct {
		path, action string
		round, turn  float64
		actor, token string
	}{
		{"/next-turn", "nextTurn", 1, 2, relaytest.BromUUID, bromTokenUUID},
		{"/next-turn", "nextTurn", 2, 0, relaytest.AriaUUID, ariaTokenUUID},
		{"/previous-turn", "previousTurn", 1, 2, relaytest.BromUUID, bromTokenUUID},
		{"/last-turn", "previousTurn", 1, 0, relaytest.AriaUUID, ariaTokenUUID},
		{"/next-round", "nextRound", 2, 0, relaytest.AriaUUID, ariaTokenUUID},
		{"/next-turn", "nextTurn", 2, 2, relaytest.BromUUID, bromTokenUUID},
		{"/last-round", "previousRound", 1, 0, relaytest.AriaUUID, ariaTokenUUID},
		{"/next-round", "nextRound", 2, 0, relaytest.AriaUUID, ariaTokenUUID},
		{"/previous-round", "previousRound", 1, 0, relaytest.AriaUUID, ariaTokenUUID},
	}
	for _, s := range steps {
		resp := tr.Do(http.MethodPost, s.path, admin, nil, map[string]any{"encounterId": id})
		if resp.Status != http.StatusOK {
			t.Fatalf("%s: %d %s", s.path, resp.Status, resp.Body)
		}
		d := resp.Data(t)
		if d["encounterId"] != id || d["action"] != s.action || d["currentRound"] != s.round || d["currentTurn"] != s.turn ||
			d["actorTurn"] != s.actor || d["tokenTurn"] != s.token || d["encounter"].(map[string]any)["round"] != s.round {
			t.Fatalf("%s: %s", s.path, resp.Body)
		}
	}
	wantError(t, tr.Do(http.MethodPost, "/previous-turn", admin, nil, map[string]any{}), 400,
		"Encounter 'Tavern brawl' is at its first turn of round 1: there is no previous turn")
	wantError(t, tr.Do(http.MethodPost, "/previous-round", admin, nil, map[string]any{}), 400,
		"Encounter 'Tavern brawl' is in round 1: there is no previous round")
}

// TestCombatPermissions: managing is for GMs; players and the trusted user
// get the GM error and change nothing; reading filters hidden combatants.
func TestCombatPermissions(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	for _, user := range []string{"Alice", "Bob", "Tess"} {
		wantError(t, tr.Do(http.MethodPost, "/start-encounter", admin, relaytest.Q("userId", user), map[string]any{"startWithPlayers": true}), 403,
			"User '"+user+"' must be a GM to start encounters")
	}
	if got := tr.encounters(t, ""); len(got) != 0 {
		t.Fatalf("refused starts created %d encounters", len(got))
	}
	// Hide Aria's and the Goblin's tokens, then start with the players'
	// tokens and the goblin, as the GM user.
	for _, token := range []string{ariaTokenUUID, goblinTokenUUID} {
		if resp := tr.Do(http.MethodPut, "/update", admin, relaytest.Q("uuid", token), map[string]any{"data": map[string]any{"hidden": true}}); resp.Status != http.StatusOK {
			t.Fatalf("hide: %d %s", resp.Status, resp.Body)
		}
	}
	resp := tr.Do(http.MethodPost, "/start-encounter", admin, relaytest.Q("userId", "Gamemaster"), map[string]any{"startWithPlayers": true, "tokenUuids": []string{goblinTokenUUID}, "rollNPC": true})
	if resp.Status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.Status, resp.Body)
	}
	id := resp.Data(t)["encounterId"].(string)
	enc := resp.Data(t)["encounter"].(map[string]any)
	if got := combatNames(enc); got[0] != "Goblin" || len(got) != 3 {
		t.Fatalf("rolled NPC first: %v", got)
	}
	if enc["combatants"].([]any)[0].(map[string]any)["initiative"] == nil {
		t.Fatal("the goblin rolled no initiative")
	}
	for user, want := range map[string][]string{
		"":      {"Goblin", "Aria Vale", "Brom Ironfist"},
		"Alice": {"Aria Vale", "Brom Ironfist"}, // owns Aria
		"Bob":   {"Brom Ironfist"},
		"Tess":  {"Brom Ironfist"},
	} {
		got := combatNames(tr.encounters(t, user)[0].(map[string]any))
		if !slices.Equal(got, want) {
			t.Errorf("%q sees %v, want %v", user, got, want)
		}
	}
	// Navigation and ending are GM-only: nothing changes.
	for _, op := range []struct{ path, action string }{
		{"/next-turn", "advance encounter turns"}, {"/next-round", "advance encounter rounds"},
		{"/previous-turn", "revert encounter turns"}, {"/last-round", "revert encounter rounds"},
		{"/end-encounter", "end encounters"},
	} {
		wantError(t, tr.Do(http.MethodPost, op.path, admin, relaytest.Q("userId", "Alice"), map[string]any{}), 403, "User 'Alice' must be a GM to "+op.action)
	}
	enc = tr.encounters(t, "")[0].(map[string]any)
	if enc["round"] != 1.0 || enc["turn"] != 0.0 {
		t.Fatalf("refused navigation changed the encounter: %v", enc)
	}
	readOnly, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "ro", Scopes: []string{"encounter:read"}})
	wantError(t, tr.Do(http.MethodPost, "/next-turn", readOnly, nil, map[string]any{}), 403, "API key lacks required scope: encounter:manage")
	if resp := tr.Do(http.MethodGet, "/encounters", readOnly, nil, nil); resp.Status != http.StatusOK {
		t.Fatalf("read with encounter:read: %d", resp.Status)
	}

	// Removing and adding: owners only, per uuid; a combatant hidden from
	// the caller (Aria's, for Bob) is, for them, not there.
	resp = tr.Do(http.MethodPost, "/remove-from-encounter", admin, relaytest.Q("userId", "Bob"), map[string]any{"uuids": []string{relaytest.BromUUID, ariaTokenUUID}})
	if resp.Status != http.StatusOK {
		t.Fatalf("remove: %d %s", resp.Status, resp.Body)
	}
	d := resp.Data(t)
	failed := d["failed"].([]any)
	if d["encounterId"] != id || len(d["removed"].([]any)) != 1 || d["removed"].([]any)[0] != relaytest.BromUUID || len(failed) != 1 ||
		failed[0].(map[string]any)["reason"] != "No combatant found for this entity" {
		t.Fatalf("remove as Bob: %s", resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/remove-from-encounter", admin, nil, map[string]any{"uuids": []string{goblinTokenUUID}})
	if resp.Status != http.StatusOK || resp.Data(t)["removed"].([]any)[0] != goblinTokenUUID {
		t.Fatalf("remove as GM: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/add-to-encounter", admin, relaytest.Q("userId", "Bob"), map[string]any{"uuids": []string{bromTokenUUID, relaytest.GoblinUUID}, "rollInitiative": true})
	d = resp.Data(t)
	if resp.Status != http.StatusOK || len(d["added"].([]any)) != 1 || d["failed"].([]any)[0].(map[string]any)["reason"] != "User 'Bob' does not have permission to add to encounter 'Actor.goblin0000000001'" {
		t.Fatalf("add as Bob: %s", resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/add-to-encounter", admin, nil, map[string]any{"uuids": []string{bromTokenUUID, "Item.potionHealing001"}})
	failed = resp.Data(t)["failed"].([]any)
	if len(failed) != 2 || failed[0].(map[string]any)["reason"] != "Already in the encounter" || failed[1].(map[string]any)["reason"] != "Entity must be a Token or Actor" {
		t.Fatalf("add duplicates: %s", resp.Body)
	}
}

// TestCombatLifecycle: missing encounters, ending, deleting tokens and
// actors, and gRPC.
func TestCombatLifecycle(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.AdminKey
	wantError(t, tr.Do(http.MethodPost, "/next-turn", admin, nil, map[string]any{}), 404, "No active encounter")
	wantError(t, tr.Do(http.MethodPost, "/end-encounter", admin, nil, map[string]any{}), 404, "No active encounter")
	wantError(t, tr.Do(http.MethodPost, "/next-round", admin, nil, map[string]any{"encounterId": "doesNotExist0001"}), 404, "Encounter with ID doesNotExist0001 not found")
	wantError(t, tr.Do(http.MethodPost, "/add-to-encounter", admin, nil, map[string]any{"uuids": []string{relaytest.AriaUUID}}), 404, "No active encounter")
	if got := tr.encounters(t, ""); len(got) != 0 {
		t.Fatalf("encounters: %v", got)
	}
	// Select the goblin, then start with the selection and the players.
	if resp := tr.Do(http.MethodPost, "/select", admin, nil, map[string]any{"uuids": []string{goblinTokenUUID}}); resp.Status != http.StatusOK {
		t.Fatalf("select: %d %s", resp.Status, resp.Body)
	}
	resp := tr.Do(http.MethodPost, "/start-encounter", admin, nil, map[string]any{"startWithSelected": true, "startWithPlayers": true, "rollAll": true})
	if resp.Status != http.StatusOK {
		t.Fatalf("start: %d %s", resp.Status, resp.Body)
	}
	id := resp.Data(t)["encounterId"].(string)
	enc := resp.Data(t)["encounter"].(map[string]any)
	if len(enc["combatants"].([]any)) != 3 || enc["name"] != "New Encounter" {
		t.Fatalf("started: %s", resp.Body)
	}
	for _, c := range enc["combatants"].([]any) {
		if c.(map[string]any)["initiative"] == nil {
			t.Fatalf("rollAll left %v without initiative", c)
		}
	}
	// Deleting the goblin's token and Brom's actor removes their combatants.
	if resp := tr.Do(http.MethodDelete, "/delete", admin, relaytest.Q("uuid", goblinTokenUUID), nil); resp.Status != http.StatusOK {
		t.Fatalf("delete token: %d %s", resp.Status, resp.Body)
	}
	if resp := tr.Do(http.MethodDelete, "/delete", admin, relaytest.Q("uuid", relaytest.BromUUID), nil); resp.Status != http.StatusOK {
		t.Fatalf("delete actor: %d %s", resp.Status, resp.Body)
	}
	enc = tr.encounters(t, "")[0].(map[string]any)
	if got := combatNames(enc); !slices.Equal(got, []string{"Aria Vale"}) {
		t.Fatalf("after deletions: %v", got)
	}
	// gRPC sees the same.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", admin)
	list, err := relayv1.NewCombatServiceClient(tr.Conn).ListEncounters(ctx, &relayv1.ListEncountersRequest{UserId: "Alice"})
	if err != nil || len(list.GetEncounters()) != 1 || list.GetEncounters()[0].GetCombatants()[0].GetInitiative() == nil {
		t.Fatalf("gRPC list: %v %v", list, err)
	}
	resp = tr.Do(http.MethodPost, "/end-encounter", admin, nil, map[string]any{"encounterId": id})
	if resp.Status != http.StatusOK || resp.Data(t)["encounterId"] != id || resp.Data(t)["message"] != "Encounter successfully ended" {
		t.Fatalf("end: %d %s", resp.Status, resp.Body)
	}
	if got := tr.encounters(t, ""); len(got) != 0 {
		t.Fatalf("after end: %v", got)
	}
	wantError(t, tr.Do(http.MethodPost, "/next-turn", admin, nil, map[string]any{"encounterId": id}), 404, "Encounter with ID "+id+" not found")
}
