package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// The read rules of GET /get hold through every other door. In the demo,
// Alice owns Aria and observes Brom; the Town Guard is LIMITED to her, the
// Goblin NONE, Innkeeper Mara OBSERVER; Bob is LIMITED on Aria. The Tavern
// scene and the Monsters folder (which holds only the Goblin) are nothing
// she sees.

// doorCase is one request through one door, as one user.
type doorCase struct {
	name         string
	method, path string
	user         string
	params       map[string]any
	status       int
	want         string // the error text (exact), or for a success a substring of the body
}

// run sends the case's request with the admin key acting as its user.
func (c doorCase) run(t *testing.T, tr *testRelay) {
	t.Helper()
	params := map[string]any{"clientId": demo.ClientID}
	for k, v := range c.params {
		params[k] = v
	}
	if c.user != "" {
		params["userId"] = c.user
	}
	var resp relaytest.Response
	if c.method == http.MethodGet {
		query := relaytest.Q()
		for k, v := range params {
			switch v := v.(type) {
			case string:
				query.Set(k, v)
			case []string:
				query.Set(k, `["`+strings.Join(v, `","`)+`"]`)
			}
		}
		resp = tr.Do(c.method, c.path, tr.AdminKey, query, nil)
	} else {
		resp = tr.Do(c.method, c.path, tr.AdminKey, nil, params)
	}
	if resp.Status != c.status {
		t.Errorf("%s: status %d, want %d: %s", c.name, resp.Status, c.status, resp.Body)
		return
	}
	if c.status != http.StatusOK {
		if got := resp.ErrorText(t); got != c.want {
			t.Errorf("%s: error %q, want %q", c.name, got, c.want)
		}
		return
	}
	if !strings.Contains(string(resp.Body), c.want) {
		t.Errorf("%s: body %s, want it to contain %s", c.name, resp.Body, c.want)
	}
}

// TestReadRulesThroughEveryDoor: the fifth-edition reads, formula
// references, lookups by name and folder reads apply the read level of
// /get, for a NONE, a LIMITED, an OBSERVER and an OWNER reader and a GM.
func TestReadRulesThroughEveryDoor(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	const (
		noneMsg   = "User 'Alice' does not have permission to view this entity"
		guardMsg  = "User 'Alice' does not have permission to view actor 'Town Guard'"
		ariaByBob = "User 'Bob' does not have permission to view actor 'Aria Vale'"
	)
	details := map[string]any{"details": []string{"stats", "skills"}}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	var cases []doorCase
	// Every ruleset read, at every level.
	for _, op := range []struct {
		method, path string
		params       map[string]any
		ok           string
	}{
		{http.MethodGet, "/dnd5e/get-actor-details", details, `"profBonus"`},
		{http.MethodPost, "/dnd5e/skill-check", map[string]any{"skill": "ste", "createChatMessage": false}, `"formula":"1d20`},
		{http.MethodPost, "/dnd5e/ability-save", map[string]any{"ability": "dex", "createChatMessage": false}, `"formula":"1d20`},
		{http.MethodPost, "/dnd5e/ability-check", map[string]any{"ability": "str", "createChatMessage": false}, `"formula":"1d20`},
		{http.MethodGet, "/dnd5e/concentration", map[string]any{}, `"isConcentrating":false`},
	} {
		for _, lv := range []struct {
			level, user, actor string
			status             int
			want               string
		}{
			{"NONE", "Alice", relaytest.GoblinUUID, http.StatusForbidden, noneMsg},
			{"LIMITED", "Alice", relaytest.GuardUUID, http.StatusForbidden, guardMsg},
			{"LIMITED", "Bob", relaytest.AriaUUID, http.StatusForbidden, ariaByBob},
			{"OBSERVER", "Alice", relaytest.MaraUUID, http.StatusOK, op.ok},
			{"OWNER", "Alice", relaytest.AriaUUID, http.StatusOK, op.ok},
			{"GM", "Gamemaster", relaytest.GoblinUUID, http.StatusOK, op.ok},
			{"no user", "", relaytest.GoblinUUID, http.StatusOK, op.ok},
		} {
			cases = append(cases, doorCase{op.path + " " + lv.level + " as " + lv.user, op.method, op.path, lv.user,
				with(op.params, "actorUuid", lv.actor), lv.status, lv.want})
		}
	}
	check := func(name, user, bonus string, status int, want string) doorCase {
		return doorCase{name, http.MethodPost, "/dnd5e/skill-check", user,
			map[string]any{"actorUuid": relaytest.AriaUUID, "skill": "arc", "bonus": bonus, "createChatMessage": false}, status, want}
	}
	cases = append(cases,
		// Formula references read only what the roller may read in full.
		check("bonus reading the roller's own actor", "Alice", "@attributes.hp.value", http.StatusOK, `"formula":"1d20 + 4 + 3 + 21"`),
		check("bonus reading an observed actor", "Alice", "@Actor.innkeeperMara001.system.attributes.hp.value", http.StatusOK, `"formula":"1d20 + 4 + 3 + 4"`),
		check("bonus reading a NONE actor", "Alice", "@Actor.goblin0000000001.system.attributes.hp.value", http.StatusForbidden,
			"User 'Alice' does not have permission to read @Actor.goblin0000000001.system.attributes.hp.value in a roll formula"),
		check("bonus reading a LIMITED actor", "Alice", "2 * @Actor.townGuard0000001.system.attributes.hp.value", http.StatusForbidden,
			"User 'Alice' does not have permission to read @Actor.townGuard0000001.system.attributes.hp.value in a roll formula"),
		check("bonus reading a NONE actor's item", "Alice", "@Actor.goblin0000000001.Item.goblinScimitar01.system.damage.base.number", http.StatusForbidden,
			"User 'Alice' does not have permission to read @Actor.goblin0000000001.Item.goblinScimitar01.system.damage.base.number in a roll formula"),
		check("bonus reading a NONE actor, as the GM", "Gamemaster", "@Actor.goblin0000000001.system.attributes.hp.value", http.StatusOK, `"formula":"1d20 + 4 + 3 + 7"`),
		check("bonus reading nothing", "", "@Actor.nobody0000000001.system.attributes.hp.value", http.StatusNotFound, "Entity not found: Actor.nobody0000000001"),

		// Lookups by name: an invisible actor is not found, as a missing one.
		doorCase{"concentration by the name of a NONE actor", http.MethodGet, "/dnd5e/concentration", "Alice", map[string]any{"actorName": "Goblin"}, http.StatusNotFound, "Actor not found: Goblin"},
		doorCase{"concentration by a name nobody has", http.MethodGet, "/dnd5e/concentration", "Alice", map[string]any{"actorName": "Dragon"}, http.StatusNotFound, "Actor not found: Dragon"},
		doorCase{"concentration by the name of a LIMITED actor", http.MethodGet, "/dnd5e/concentration", "Alice", map[string]any{"actorName": "town guard"}, http.StatusForbidden, guardMsg},
		doorCase{"concentration by name as the GM", http.MethodGet, "/dnd5e/concentration", "Gamemaster", map[string]any{"actorName": "goblin"}, http.StatusOK, relaytest.GoblinUUID},
		doorCase{"transfer to a NONE actor by name", http.MethodPost, "/dnd5e/transfer-currency", "Alice",
			map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorName": "Goblin", "currency": map[string]any{"gp": 1}}, http.StatusNotFound, "Actor not found: Goblin"},
		doorCase{"equip on a NONE actor by name", http.MethodPost, "/dnd5e/equip-item", "Alice",
			map[string]any{"actorName": "Goblin", "itemName": "Shield", "equipped": false}, http.StatusNotFound, "Actor not found: Goblin"},
		// A target name is looked for among the tokens of the active scene
		// she sees (none: the Tavern is NONE to players); one she cannot
		// see is exactly a name nobody has: the spell goes off without a
		// target, as on the tabletop.
		doorCase{"target a NONE actor by name", http.MethodPost, "/dnd5e/use-spell", "Alice",
			map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt", "targetName": "Goblin"}, http.StatusOK, `"target":null`},
		doorCase{"target by a name nobody has", http.MethodPost, "/dnd5e/use-spell", "Alice",
			map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt", "targetName": "Dragon"}, http.StatusOK, `"target":null`},
		doorCase{"target an observed actor by uuid", http.MethodPost, "/dnd5e/use-spell", "Alice",
			map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt", "targetUuid": relaytest.BromUUID}, http.StatusOK, `"actorUuid":"` + relaytest.BromUUID + `"`},
		doorCase{"target a NONE actor by uuid", http.MethodPost, "/dnd5e/use-spell", "Alice",
			map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt", "targetUuid": relaytest.GoblinUUID}, http.StatusForbidden, noneMsg},

		// Folders: one with nothing Alice sees is not hers to see.
		doorCase{"get a folder holding only a NONE actor", http.MethodGet, "/get", "Alice", map[string]any{"uuid": "Folder.monstersFolder01"}, http.StatusForbidden, noneMsg},
		doorCase{"structure of that folder", http.MethodGet, "/structure", "Alice", map[string]any{"path": "Folder.monstersFolder01"}, http.StatusForbidden, noneMsg},
		doorCase{"get a folder holding her actor", http.MethodGet, "/get", "Alice", map[string]any{"uuid": "Folder." + relaytest.HeroesID}, http.StatusOK, `"name":"Heroes"`},
		doorCase{"get that folder as the GM", http.MethodGet, "/get", "Gamemaster", map[string]any{"uuid": "Folder.monstersFolder01"}, http.StatusOK, `"name":"Monsters"`},

		// Write refusals name only what the user may see.
		doorCase{"update a NONE actor", http.MethodPut, "/update", "Alice", map[string]any{"uuid": relaytest.GoblinUUID, "data": map[string]any{"name": "Mine"}}, http.StatusForbidden,
			"User 'Alice' does not have permission to update '" + relaytest.GoblinUUID + "'"},
		doorCase{"update a LIMITED actor", http.MethodPut, "/update", "Alice", map[string]any{"uuid": relaytest.GuardUUID, "data": map[string]any{"name": "Mine"}}, http.StatusForbidden,
			"User 'Alice' does not have permission to update 'Town Guard'"},
	)
	for _, c := range cases {
		c.run(t, tr)
	}
	// Nothing above rolled to chat or changed a coin.
	if d := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t); d["system"].(map[string]any)["currency"].(map[string]any)["gp"] != 85.0 {
		t.Fatalf("Aria's gold changed: %v", d["system"].(map[string]any)["currency"])
	}
}

// TestChatMessagesAndEncountersFollowTheReadRules: a roll about an actor
// reaches, as a chat message, only those who may read the actor; a hidden
// combatant is not in a player's read of the encounter.
func TestChatMessagesAndEncountersFollowTheReadRules(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	// The GM rolls for the Goblin, Alice for Aria (Bob LIMITED on her),
	// the GM for Mara (everyone observes her).
	messageOf := func(user, actor string) string {
		t.Helper()
		resp := tr.dnd5eCall(http.MethodPost, "skill-check", user, map[string]any{"actorUuid": actor, "skill": "ste"})
		if resp.Status != http.StatusOK {
			t.Fatalf("check: %d %s", resp.Status, resp.Body)
		}
		found := ""
		w, err := tr.Worlds().World(context.Background(), demo.ClientID)
		if err != nil {
			t.Fatal(err)
		}
		err = w.View(context.Background(), func(v *world.View) error {
			v.Each("ChatMessage", func(doc world.Document) bool {
				if sp, _ := doc["speaker"].(map[string]any); sp != nil && "Actor."+sp["actor"].(string) == actor {
					found = "ChatMessage." + doc["_id"].(string)
				}
				return true
			})
			return nil
		})
		if err != nil || found == "" {
			t.Fatalf("no chat message about %s: %v", actor, err)
		}
		return found
	}
	goblinMsg, ariaMsg, maraMsg := messageOf("", relaytest.GoblinUUID), messageOf("Alice", relaytest.AriaUUID), messageOf("", relaytest.MaraUUID)
	for _, c := range []struct {
		user, msg string
		status    int
	}{
		{"Alice", goblinMsg, http.StatusForbidden}, {"Bob", goblinMsg, http.StatusForbidden}, {"Gamemaster", goblinMsg, http.StatusOK},
		{"Alice", ariaMsg, http.StatusOK}, {"Bob", ariaMsg, http.StatusForbidden}, {"Tess", ariaMsg, http.StatusForbidden},
		{"Bob", maraMsg, http.StatusOK}, {"Tess", maraMsg, http.StatusOK},
	} {
		if resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", c.msg, "userId", c.user), nil); resp.Status != c.status {
			t.Errorf("%s reading %s: %d, want %d: %s", c.user, c.msg, resp.Status, c.status, resp.Body)
		}
	}

	// A hidden goblin in an encounter: not in Alice's read of it, nor in
	// her list, nor readable by uuid.
	if resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", relaytest.TavernScene+".Token.goblinToken00001"), map[string]any{"data": map[string]any{"hidden": true}}); resp.Status != http.StatusOK {
		t.Fatalf("hide: %s", resp.Body)
	}
	resp := tr.Do(http.MethodPost, "/start-encounter", tr.AdminKey, nil, map[string]any{"tokenUuids": []string{relaytest.TavernScene + ".Token.goblinToken00001", relaytest.TavernScene + ".Token.bromToken0000001"}})
	if resp.Status != http.StatusOK {
		t.Fatalf("start: %s", resp.Body)
	}
	enc := resp.Data(t)["encounter"].(map[string]any)
	combatUUID := "Combat." + enc["id"].(string)
	goblinCombatant := combatUUID + ".Combatant." + combatantID(t, enc, "Goblin")
	for user, want := range map[string]bool{"Alice": false, "Gamemaster": true} {
		body := string(tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", combatUUID, "userId", user), nil).Body)
		if strings.Contains(body, "Goblin") != want || !strings.Contains(body, "Brom Ironfist") {
			t.Errorf("%s reads the encounter as %s", user, body)
		}
		if got := strings.Join(combatNames(tr.encounters(t, user)[0].(map[string]any)), ","); strings.Contains(got, "Goblin") != want {
			t.Errorf("%s lists %s", user, got)
		}
	}
	if resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", goblinCombatant, "userId", "Alice"), nil); resp.Status != http.StatusForbidden {
		t.Errorf("Alice reads the hidden combatant: %d %s", resp.Status, resp.Body)
	}
}

// TestOwnersCannotChangeTypeOwnershipOrFolderVisibility: writing a
// document one owns does not extend to its type, its ownership or a
// folder one cannot see, through every write; each refusal is a 403 and
// changes nothing.
func TestOwnersCannotChangeTypeOwnershipOrFolderVisibility(t *testing.T) {
	t.Parallel()
	sr := startSecurityRelay(t)
	// A journal folder the GM keeps for themself (empty: no player sees
	// it); Tess (TRUSTED) may create journal entries.
	resp := sr.Do(http.MethodPost, "/create-folder", sr.AdminKey, nil, map[string]any{"clientId": demo.ClientID, "name": "GM notes", "folderType": "JournalEntry"})
	if resp.Status != http.StatusOK {
		t.Fatalf("create folder: %s", resp.Body)
	}
	notes := resp.Data(t)["id"].(string)
	const (
		ownershipMsg = "User 'Alice' does not have permission to change the ownership of 'Aria Vale'"
		typeMsg      = "User 'Alice' does not have permission to change the type of 'Aria Vale'"
		monsters     = "monstersFolder01"
	)
	update := func(uuid string, data map[string]any, want string) doorCase {
		return doorCase{"update " + uuid, http.MethodPut, "/update", "Alice", map[string]any{"uuid": uuid, "data": data}, http.StatusForbidden, want}
	}
	refusals := []doorCase{
		update(relaytest.AriaUUID, map[string]any{"type": "npc"}, typeMsg),
		update(relaytest.AriaUUID, map[string]any{"-=type": nil}, typeMsg),
		update(relaytest.WandUUID, map[string]any{"type": "weapon"}, "User 'Alice' does not have permission to change the type of 'Wand of Magic Missiles'"),
		update(relaytest.AriaUUID, map[string]any{"ownership": map[string]any{"default": 3}}, ownershipMsg),
		update(relaytest.AriaUUID, map[string]any{"ownership.default": 3}, ownershipMsg),
		update(relaytest.AriaUUID, map[string]any{"ownership.bobUser000000001": 3}, ownershipMsg),
		update(relaytest.AriaUUID, map[string]any{"-=ownership": nil}, ownershipMsg),
		update(relaytest.AriaUUID, map[string]any{"==ownership": map[string]any{"default": 3}}, ownershipMsg),
		update(relaytest.WandUUID, map[string]any{"ownership": map[string]any{"default": 3}}, "User 'Alice' does not have permission to change the ownership of 'Wand of Magic Missiles'"),
		{"increase ownership.default", http.MethodPost, "/increase", "Alice", map[string]any{"uuid": relaytest.AriaUUID, "attribute": "ownership.default", "amount": 3}, http.StatusForbidden, ownershipMsg},
		{"decrease ownership of another user", http.MethodPost, "/decrease", "Alice", map[string]any{"uuid": relaytest.AriaUUID, "attribute": "ownership.bobUser000000001", "amount": 1}, http.StatusForbidden, ownershipMsg},
		{"create an embedded item with an ownership", http.MethodPost, "/create", "Alice",
			map[string]any{"entityType": "Item", "parentUuid": relaytest.AriaUUID, "data": map[string]any{"name": "Gem", "type": "loot", "ownership": map[string]any{"default": 3}}}, http.StatusForbidden,
			"User 'Alice' does not have permission to set the ownership of a new Item document: only a GM may set ownership"},
		{"create a journal entry with an ownership", http.MethodPost, "/create", "Tess",
			map[string]any{"entityType": "JournalEntry", "data": map[string]any{"name": "Diary", "ownership.default": 3}}, http.StatusForbidden,
			"User 'Tess' does not have permission to set the ownership of a new JournalEntry document: only a GM may set ownership"},
	}
	// A folder she cannot see is answered as a missing one, the same
	// status and text with the id in it, so that trying ids tells a
	// player nothing about the folders hidden from her.
	const missing = "noSuchFolder0001"
	for _, folder := range []string{monsters, missing} {
		notFound := "Folder not found with ID: " + folder
		refusals = append(refusals,
			doorCase{"update into folder " + folder, http.MethodPut, "/update", "Alice", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"folder": folder}}, http.StatusNotFound, notFound},
			doorCase{"update with a name into folder " + folder, http.MethodPut, "/update", "Alice", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"name": "Aria", "folder": folder}}, http.StatusNotFound, notFound})
	}
	for _, folder := range []string{notes, missing} {
		notFound := "Folder not found with ID: " + folder
		refusals = append(refusals,
			doorCase{"create in folder " + folder, http.MethodPost, "/create", "Tess",
				map[string]any{"entityType": "JournalEntry", "folder": folder, "data": map[string]any{"name": "Diary"}}, http.StatusNotFound, notFound},
			doorCase{"create with folder " + folder + " in the data", http.MethodPost, "/create", "Tess",
				map[string]any{"entityType": "JournalEntry", "data": map[string]any{"name": "Diary", "folder": folder}}, http.StatusNotFound, notFound})
	}
	before := worldDigest(t, sr.testRelay)
	for _, c := range refusals {
		c.run(t, sr.testRelay)
	}
	if after := worldDigest(t, sr.testRelay); after != before {
		t.Fatal("refused writes changed the world")
	}

	// What owners keep: their own folder, the same type, plain updates;
	// a GM changes anything.
	for _, c := range []doorCase{
		{"owner into a folder she sees", http.MethodPut, "/update", "Alice", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"folder": relaytest.HeroesID, "type": "character", "name": "Aria"}}, http.StatusOK, `"name":"Aria"`},
		{"Tess creates a journal entry", http.MethodPost, "/create", "Tess", map[string]any{"entityType": "JournalEntry", "data": map[string]any{"name": "Diary"}}, http.StatusOK, `"tessUser00000001":3`},
		{"GM into any folder", http.MethodPut, "/update", "Gamemaster", map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"folder": monsters, "type": "npc", "ownership.default": 1}}, http.StatusOK, `"folder":"` + monsters + `"`},
	} {
		c.run(t, sr.testRelay)
	}
}

// TestReadRulesOverGRPC: the same rules, called over gRPC, with the
// statuses' gRPC codes.
func TestReadRulesOverGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	rules := relayv1.NewDnd5EServiceClient(tr.Conn)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)
	no := false
	wantCode := func(what string, err error, code codes.Code, msg string) {
		t.Helper()
		if status.Code(err) != code || status.Convert(err).Message() != msg {
			t.Errorf("%s: %v, want %v %q", what, err, code, msg)
		}
	}

	_, err := rules.GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{UserId: "Alice", ActorUuid: relaytest.GuardUUID, Details: []string{"stats"}})
	wantCode("details of a LIMITED actor", err, codes.PermissionDenied, "User 'Alice' does not have permission to view actor 'Town Guard'")
	_, err = rules.GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{UserId: "Alice", ActorUuid: relaytest.GoblinUUID, Details: []string{"stats"}})
	wantCode("details of a NONE actor", err, codes.PermissionDenied, "User 'Alice' does not have permission to view this entity")
	if d, err := rules.GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{UserId: "Alice", ActorUuid: relaytest.BromUUID, Details: []string{"stats"}}); err != nil || d.GetStats() == nil {
		t.Errorf("details of an observed actor: %v", err)
	}
	_, err = rules.SkillCheck(ctx, &relayv1.SkillCheckRequest{UserId: "Alice", ActorUuid: relaytest.AriaUUID, Skill: "arc", Bonus: "@Actor.goblin0000000001.system.attributes.hp.value", CreateChatMessage: &no})
	wantCode("a bonus reading a NONE actor", err, codes.PermissionDenied, "User 'Alice' does not have permission to read @Actor.goblin0000000001.system.attributes.hp.value in a roll formula")
	_, err = rules.GetConcentration(ctx, &relayv1.GetConcentrationRequest{UserId: "Alice", ActorName: "Goblin"})
	wantCode("a NONE actor by name", err, codes.NotFound, "Actor not found: Goblin")
	if use, err := rules.UseSpell(ctx, &relayv1.UseSpellRequest{UserId: "Alice", ActorUuid: relaytest.AriaUUID, AbilityName: "Fire Bolt", TargetName: "Goblin"}); err != nil || use.GetTarget() != nil {
		t.Errorf("a NONE target by name: %v, target %s; want no target", err, use.GetTarget())
	}

	_, err = docs.GetDocument(ctx, &relayv1.GetDocumentRequest{UserId: "Alice", Uuid: "Folder.monstersFolder01"})
	wantCode("a folder she cannot see", err, codes.PermissionDenied, "User 'Alice' does not have permission to view this entity")
	data, _ := structpb.NewStruct(map[string]any{"type": "npc"})
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{UserId: "Alice", Uuid: relaytest.AriaUUID, Data: data})
	wantCode("changing the type", err, codes.PermissionDenied, "User 'Alice' does not have permission to change the type of 'Aria Vale'")
	data, _ = structpb.NewStruct(map[string]any{"folder": "monstersFolder01"})
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{UserId: "Alice", Uuid: relaytest.AriaUUID, Data: data})
	wantCode("moving into a folder she cannot see", err, codes.NotFound, "Folder not found with ID: monstersFolder01")
	data, _ = structpb.NewStruct(map[string]any{"folder": "noSuchFolder0001"})
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{UserId: "Alice", Uuid: relaytest.AriaUUID, Data: data})
	wantCode("moving into a missing folder", err, codes.NotFound, "Folder not found with ID: noSuchFolder0001")
	amount := 3.0
	_, err = docs.IncreaseAttribute(ctx, &relayv1.IncreaseAttributeRequest{UserId: "Alice", Uuid: relaytest.AriaUUID, Attribute: "ownership.default", Amount: &amount})
	wantCode("raising ownership.default", err, codes.PermissionDenied, "User 'Alice' does not have permission to change the ownership of 'Aria Vale'")
	if got := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t); got["type"] != "character" || got["folder"] != relaytest.HeroesID ||
		got["ownership"].(map[string]any)["default"] != 0.0 {
		t.Fatalf("refused gRPC writes changed Aria: %v %v %v", got["type"], got["folder"], got["ownership"])
	}
}

// TestUpdateRefusesUUIDChange: a `uuid` in update data that is not the
// document's own is refused with 400 naming it, over REST and gRPC, and
// nothing changes; the document's own uuid, as a read returns it, may come
// back with the rest of it.
func TestUpdateRefusesUUIDChange(t *testing.T) {
	t.Parallel()
	tr := startSecurityRelay(t).testRelay
	const msg = "'uuid' cannot be changed: it is the document's address"
	before := worldDigest(t, tr)
	for _, data := range []map[string]any{
		{"uuid": "Actor.someoneElse00001"},
		{"name": "Aria", "uuid": "Actor.someoneElse00001"},
		{"-=uuid": nil},
	} {
		r := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"clientId": demo.ClientID, "uuid": relaytest.AriaUUID, "data": data})
		if r.Status != http.StatusBadRequest || r.ErrorText(t) != msg {
			t.Errorf("REST update %v: %d %s", data, r.Status, r.Body)
		}
		s, _ := structpb.NewStruct(data)
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
		_, err := relayv1.NewDocumentServiceClient(tr.Conn).UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{ClientId: demo.ClientID, Uuid: relaytest.AriaUUID, Data: s})
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != msg {
			t.Errorf("gRPC update %v: %v", data, err)
		}
	}
	if after := worldDigest(t, tr); after != before {
		t.Fatal("refused updates changed the world")
	}
	r := tr.Do(http.MethodPut, "/update", tr.AdminKey, nil, map[string]any{"clientId": demo.ClientID, "uuid": relaytest.AriaUUID, "data": map[string]any{"name": "Aria", "uuid": relaytest.AriaUUID}})
	if r.Status != http.StatusOK {
		t.Fatalf("update with the document's own uuid: %d %s", r.Status, r.Body)
	}
}
