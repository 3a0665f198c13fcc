package main

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// dnd5eCall sends a ruleset request with the admin key acting as user ("" for
// GM-level access): GET requests take the parameters in the query, others in
// the JSON body.
func (tr *testRelay) dnd5eCall(method, op, user string, params map[string]any) relaytest.Response {
	tr.t.Helper()
	if user != "" {
		params["userId"] = user
	}
	if method == http.MethodGet {
		v := relaytest.Q()
		for k, p := range params {
			switch p := p.(type) {
			case string:
				v.Set(k, p)
			case []string:
				v.Set(k, `["`+strings.Join(p, `","`)+`"]`)
			}
		}
		return tr.Do(method, "/dnd5e/"+op, tr.AdminKey, v, nil)
	}
	return tr.Do(method, "/dnd5e/"+op, tr.AdminKey, nil, params)
}

// expect checks a response's status and, for a success, its type; for an
// error, that its text contains want.
func expect(t *testing.T, r relaytest.Response, status int, typ, want string) map[string]any {
	t.Helper()
	if r.Status != status {
		t.Fatalf("status %d, want %d: %s", r.Status, status, r.Body)
	}
	body := r.JSON(t)
	if status == http.StatusOK {
		if body["type"] != typ {
			t.Fatalf("type %v, want %s: %s", body["type"], typ, r.Body)
		}
		return r.Data(t)
	}
	if !strings.Contains(r.ErrorText(t), want) {
		t.Fatalf("error %q, want it to contain %q", r.ErrorText(t), want)
	}
	return nil
}

func TestDnd5eReadsAndChecks(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	details := func(user, actor string, status int) map[string]any {
		return expect(t, tr.dnd5eCall(http.MethodGet, "get-actor-details", user, map[string]any{"actorUuid": actor, "details": []string{"stats", "skills", "spells", "conditions"}}),
			status, "get-actor-details-result", "does not have permission to view actor")
	}
	// The owner and the GM get the details; a LIMITED player (Bob) sees a
	// name, not a sheet.
	details("Bob", relaytest.AriaUUID, http.StatusForbidden)
	for _, user := range []string{"Alice", "Gamemaster", ""} {
		d := details(user, relaytest.AriaUUID, http.StatusOK)
		stats := d["stats"].(map[string]any)
		if d["uuid"] != relaytest.AriaUUID || stats["profBonus"] != 3.0 || stats["level"] != 5.0 || d["skills"].(map[string]any)["arc"].(map[string]any)["total"] != 7.0 {
			t.Fatalf("%s: %v", user, d)
		}
		if d["spellSlots"] == nil || d["concentration"].(map[string]any)["active"] != false {
			t.Fatalf("%s: details missing: %v", user, d)
		}
		// Details not asked for are left out, not null, as the tabletop
		// module leaves them out.
		for _, k := range []string{"resources", "items", "features", "abilities", "details"} {
			if v, ok := d[k]; ok {
				t.Fatalf("%s: %s not asked for, but in the answer: %v", user, k, v)
			}
		}
	}
	expect(t, tr.dnd5eCall(http.MethodGet, "get-actor-details", "Alice", map[string]any{"actorUuid": relaytest.GoblinUUID, "details": []string{"stats"}}),
		http.StatusForbidden, "", "User 'Alice' does not have permission to view this entity")
	expect(t, tr.dnd5eCall(http.MethodGet, "get-actor-details", "", map[string]any{"actorUuid": relaytest.AriaUUID}), http.StatusBadRequest, "", "details array is required")

	// Checks need OBSERVER, as their formula shows the modifiers: the owner
	// and the GM roll for Aria, Bob (LIMITED) is refused.
	for _, tc := range []struct{ op, key, value, typ, prefix string }{
		{"skill-check", "skill", "arc", "skill-check-result", "1d20 + 4 + 3"},
		{"ability-save", "ability", "int", "ability-save-result", "1d20 + 4 + 3"},
		{"ability-check", "ability", "dex", "ability-check-result", "1d20 + 2"},
	} {
		expect(t, tr.dnd5eCall(http.MethodPost, tc.op, "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, tc.key: tc.value, "createChatMessage": false}),
			http.StatusForbidden, "", "User 'Bob' does not have permission to view actor 'Aria Vale'")
		for _, user := range []string{"Alice", ""} {
			d := expect(t, tr.dnd5eCall(http.MethodPost, tc.op, user, map[string]any{"actorUuid": relaytest.AriaUUID, tc.key: tc.value, "advantage": true, "createChatMessage": false}),
				http.StatusOK, tc.typ, "")
			total := d["total"].(float64)
			if d["actorUuid"] != relaytest.AriaUUID || d[tc.key] != tc.value || !strings.HasPrefix(d["formula"].(string), strings.Replace(tc.prefix, "1d20", "2d20kh", 1)) || total < 1 || total > 27 {
				t.Fatalf("%s as %q: %v", tc.op, user, d)
			}
		}
	}
	d := expect(t, tr.dnd5eCall(http.MethodPost, "skill-check", "", map[string]any{"actorUuid": relaytest.BromUUID, "skill": "ath", "bonus": "+2"}), http.StatusOK, "skill-check-result", "")
	if d["formula"] != "1d20 + 4 + 3 + 2" {
		t.Fatalf("bonus: %v", d)
	}
	expect(t, tr.dnd5eCall(http.MethodPost, "skill-check", "", map[string]any{"actorUuid": relaytest.BromUUID, "skill": "fly"}), http.StatusBadRequest, "", "Invalid skill 'fly'. Valid skills: acr,")
	expect(t, tr.dnd5eCall(http.MethodPost, "skill-check", "Alice", map[string]any{"actorUuid": relaytest.GoblinUUID, "skill": "ste"}), http.StatusForbidden, "", "User 'Alice' does not have permission to view this entity")
	expect(t, tr.dnd5eCall(http.MethodPost, "skill-check", "", map[string]any{"actorUuid": relaytest.BromUUID, "skill": "ath", "bonus": "1d"}), http.StatusBadRequest, "", "at position")

	// Concentration: read with OBSERVER, change with OWNER.
	expect(t, tr.dnd5eCall(http.MethodGet, "concentration", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID}), http.StatusForbidden, "", "User 'Bob' does not have permission to view actor 'Aria Vale'")
	c := expect(t, tr.dnd5eCall(http.MethodGet, "concentration", "Alice", map[string]any{"actorUuid": relaytest.BromUUID}), http.StatusOK, "get-concentration-result", "")
	if c["isConcentrating"] != false || c["effect"] != nil || c["spell"] != nil {
		t.Fatalf("%v", c)
	}
	expect(t, tr.dnd5eCall(http.MethodPost, "break-concentration", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID}), http.StatusBadRequest, "", "Actor 'Aria Vale' is not concentrating")
	u := expect(t, tr.dnd5eCall(http.MethodPost, "use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Hold Person", "targetName": "Brom Ironfist"}), http.StatusOK, "use-spell-result", "")
	if u["uuid"] != relaytest.AriaUUID || u["ability"] != "Hold Person" || u["concentration"] != true || u["save"].(map[string]any)["dc"] != 15.0 || u["roll"] != nil {
		t.Fatalf("%v", u)
	}
	c = expect(t, tr.dnd5eCall(http.MethodGet, "concentration", "", map[string]any{"actorName": "aria vale"}), http.StatusOK, "get-concentration-result", "")
	if c["isConcentrating"] != true || c["spell"] != "Hold Person" || c["effect"].(map[string]any)["statuses"].([]any)[0] != "concentrating" {
		t.Fatalf("%v", c)
	}
	expect(t, tr.dnd5eCall(http.MethodPost, "concentration-save", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, "damage": 12}), http.StatusForbidden, "", "User 'Bob' does not have permission to roll concentration saves for 'Aria Vale'")
	s := expect(t, tr.dnd5eCall(http.MethodPost, "concentration-save", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "damage": 40}), http.StatusOK, "concentration-save-result", "")
	if s["dc"] != 20.0 || s["formula"] != "1d20 + 2" || s["maintained"] != (s["total"].(float64) >= 20) {
		t.Fatalf("%v", s)
	}
	if s["maintained"] == true {
		b := expect(t, tr.dnd5eCall(http.MethodPost, "break-concentration", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID}), http.StatusOK, "break-concentration-result", "")
		if b["broken"] != true || b["removedEffectId"] == "" {
			t.Fatalf("%v", b)
		}
	}
	c = expect(t, tr.dnd5eCall(http.MethodGet, "concentration", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID}), http.StatusOK, "get-concentration-result", "")
	if c["isConcentrating"] != false {
		t.Fatalf("still concentrating: %v", c)
	}
}

func TestDnd5eWrites(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	post := func(op, user string, params map[string]any, status int, want string) map[string]any {
		t.Helper()
		return expect(t, tr.dnd5eCall(http.MethodPost, op, user, params), status, op+"-result", want)
	}

	// Death saves: only at 0 HP; the owner rolls, an observer may not.
	post("death-save", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusBadRequest, "not at 0 hit points")
	if r := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), map[string]any{"data": map[string]any{"system.attributes.hp.value": 0}}); r.Status != http.StatusOK {
		t.Fatalf("update: %d %s", r.Status, r.Body)
	}
	d := post("death-save", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "createChatMessage": false}, http.StatusOK, "")
	ds := d["deathSaves"].(map[string]any)
	if d["formula"] != "1d20" || ds["success"].(float64)+ds["failure"].(float64) > 2 || d["actorUuid"] != relaytest.AriaUUID {
		t.Fatalf("%v", d)
	}
	post("death-save", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusForbidden, "User 'Bob' does not have permission to roll death saves for 'Aria Vale'")

	// Rests: Bob owns Brom, Alice only observes him.
	r := post("short-rest", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "autoHD": true, "autoHDThreshold": 0.9}, http.StatusOK, "")
	res := r["result"].(map[string]any)
	if r["actorUuid"] != relaytest.BromUUID || res["type"] != "short" || res["longRest"] != false || res["dhd"].(float64) >= 0 || res["clone"].(map[string]any)["uuid"] != relaytest.BromUUID {
		t.Fatalf("%v", r)
	}
	for _, k := range []string{"deltas", "updateData", "updateItems", "newDay", "rolls", "dhp"} {
		if _, ok := res[k]; !ok {
			t.Fatalf("rest result lacks %s: %v", k, res)
		}
	}
	post("short-rest", "Alice", map[string]any{"actorUuid": relaytest.BromUUID}, http.StatusForbidden, "User 'Alice' does not have permission to perform a short rest on 'Brom Ironfist'")
	post("short-rest", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "autoHD": true, "autoHDThreshold": -1}, http.StatusBadRequest, "autoHDThreshold must be a fraction from 0 to 1 or a number of missing hit points above 1")
	// The death saves above roll a real d20: a natural 20 leaves Aria at 1
	// HP, so the rest restores whatever is missing up to her maximum, 32.
	aria := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Data(t)
	hpBefore := aria["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"].(float64)
	r = post("long-rest", "", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusOK, "")
	if res = r["result"].(map[string]any); res["type"] != "long" || res["longRest"] != true || res["newDay"] != true || res["dhp"] != 32.0-hpBefore {
		t.Fatalf("hp before %v: %v", hpBefore, r)
	}
	if hp := res["clone"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]; hp != 32.0 {
		t.Fatalf("hp after a long rest: %v", hp)
	}
	post("long-rest", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusForbidden, "perform a long rest on 'Aria Vale'")

	// Experience, currency, charges.
	x := post("modify-experience", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "amount": -500}, http.StatusOK, "")
	if x["oldXp"] != 6500.0 || x["newXp"] != 6000.0 {
		t.Fatalf("%v", x)
	}
	post("modify-experience", "Alice", map[string]any{"actorUuid": relaytest.BromUUID, "amount": 5}, http.StatusForbidden, "User 'Alice' does not have permission to modify experience on 'Brom Ironfist'")
	post("modify-experience", "", map[string]any{"actorUuid": relaytest.AriaUUID, "amount": -7000}, http.StatusBadRequest, "Cannot remove 7000 XP")
	post("modify-experience", "", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusBadRequest, "amount must be a number")

	m := post("modify-currency", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "currency": "gp", "amount": -5}, http.StatusOK, "")
	if m["oldAmount"] != 85.0 || m["newAmount"] != 80.0 || m["balance"].(map[string]any)["sp"] != 14.0 {
		t.Fatalf("%v", m)
	}
	post("modify-currency", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "currency": "gp", "amount": -100}, http.StatusBadRequest, "Insufficient gp: Aria Vale has 80, needs 100")
	post("modify-currency", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, "currency": "gp", "amount": 5}, http.StatusForbidden, "modify currency on 'Aria Vale'")

	post("transfer-currency", "Alice", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorUuid": relaytest.BromUUID, "currency": map[string]any{"gp": 1}}, http.StatusForbidden, "User 'Alice' does not have permission to transfer currency to 'Brom Ironfist'")
	post("transfer-currency", "", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorName": "Brom Ironfist", "currency": map[string]any{"gp": 81, "sp": 1}}, http.StatusBadRequest, "Insufficient gp: Aria Vale has 80, needs 81")
	tc := post("transfer-currency", "Gamemaster", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorName": "Brom Ironfist", "currency": map[string]any{"gp": 30, "cp": 5}}, http.StatusOK, "")
	if tc["sourceBalance"].(map[string]any)["gp"] != 50.0 || tc["targetBalance"].(map[string]any)["gp"] != 72.0 || tc["transferred"].(map[string]any)["cp"] != 5.0 || tc["targetActorUuid"] != relaytest.BromUUID {
		t.Fatalf("%v", tc)
	}

	// The long rest above was a new day: the wand regained its charges.
	ch := post("modify-item-charges", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Wand of Magic Missiles", "amount": -1}, http.StatusOK, "")
	if ch["itemUuid"] != relaytest.WandUUID || ch["oldCharges"] != 7.0 || ch["newCharges"] != 6.0 {
		t.Fatalf("%v", ch)
	}
	post("modify-item-charges", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, "itemUuid": relaytest.WandUUID, "amount": 1}, http.StatusForbidden, "modify item charges on 'Aria Vale'")

	// Equipment, attunement, spell preparation.
	eq := post("equip-item", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Ring of Protection", "equipped": true}, http.StatusOK, "")
	if eq["equipped"] != true || eq["itemName"] != "Ring of Protection" || eq["actorUuid"] != relaytest.AriaUUID {
		t.Fatalf("%v", eq)
	}
	post("equip-item", "Alice", map[string]any{"actorUuid": relaytest.BromUUID, "itemName": "Shield", "equipped": false}, http.StatusForbidden, "User 'Alice' does not have permission to modify items on 'Brom Ironfist'")
	post("equip-item", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Ring of Protection"}, http.StatusBadRequest, "equipped must be a boolean")
	at := post("attune-item", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Ring of Protection", "attuned": true}, http.StatusOK, "")
	if at["attuned"] != true {
		t.Fatalf("%v", at)
	}
	post("attune-item", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "itemUuid": relaytest.WandUUID, "attuned": true}, http.StatusBadRequest, "does not require attunement")

	p := post("prepare-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "spellName": "Detect Magic", "prepared": true}, http.StatusOK, "")
	if p["prepared"] != true || p["spellUuid"] != relaytest.AriaUUID+".Item.detectMagic00001" || p["spellName"] != "Detect Magic" {
		t.Fatalf("%v", p)
	}
	post("prepare-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "spellName": "Fire Bolt", "prepared": false}, http.StatusBadRequest, "cantrip")
	post("prepare-spell", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, "spellName": "Fireball", "prepared": false}, http.StatusForbidden, "prepare spells on 'Aria Vale'")

	// The four uses.
	// Bob sees no goblin (the actor is NONE, the Tavern too): as for a
	// name that matches nothing, he swings without a target; the GM
	// targets it, and rolls damage only on a hit.
	if u := post("use-item", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetName": "Goblin"}, http.StatusOK, ""); u["target"] != nil {
		t.Fatalf("%v", u)
	}
	u := post("use-item", "", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetName": "Goblin"}, http.StatusOK, "")
	roll := u["roll"].(map[string]any)
	if u["ability"] != "Longsword" || roll["formula"] != "1d20 + 4 + 3" || (len(u["damageRolls"].([]any)) == 1) != (roll["hit"] == true) || u["target"].(map[string]any)["actorUuid"] != relaytest.GoblinUUID {
		t.Fatalf("%v", u)
	}
	u = post("use-feature", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Second Wind"}, http.StatusOK, "")
	if u["consumed"].(map[string]any)["uses"] != 1.0 || u["roll"] != nil || u["target"] != nil {
		t.Fatalf("%v", u)
	}
	post("use-feature", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Second Wind"}, http.StatusBadRequest, "Second Wind has no uses left")
	u = post("use-ability", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityUuid": relaytest.AriaUUID + ".Item.magicMissile0001"}, http.StatusOK, "")
	if u["consumed"].(map[string]any)["spellSlot"] != "spell1" {
		t.Fatalf("%v", u)
	}
	post("use-spell", "Bob", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt"}, http.StatusForbidden, "User 'Bob' does not have permission to use abilities on 'Aria Vale'")
	post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityUuid": relaytest.BromUUID + ".Item.secondWind000001"}, http.StatusBadRequest, "does not belong to actor Aria Vale")
	post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID}, http.StatusBadRequest, "abilityUuid or abilityName is required")
}

// TestDnd5eGRPC calls the ruleset over gRPC, as an observer (Alice on
// Brom) who may roll his checks but not change him.
func TestDnd5eGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	client := relayv1.NewDnd5EServiceClient(tr.Conn)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	no := false
	got, err := client.SkillCheck(ctx, &relayv1.SkillCheckRequest{UserId: "Alice", ActorUuid: relaytest.BromUUID, Skill: "ath", CreateChatMessage: &no})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got.GetFormula(), "1d20 + 4 + 3") || got.GetTotal() < 8 || got.GetTotal() > 27 {
		t.Fatalf("%v", got)
	}
	amount := int32(10)
	_, err = client.ModifyExperience(ctx, &relayv1.ModifyExperienceRequest{UserId: "Alice", ActorUuid: relaytest.BromUUID, Amount: &amount})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("observer changed experience: %v", err)
	}
}
