package main

import (
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// jsonPath reads a dotted path of a decoded JSON object.
func jsonPath(v any, p string) any {
	for part := range strings.SplitSeq(p, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[part]
	}
	return v
}

// TestRulesAdventure walks a short adventure with the demo world's
// characters through the real relay, over REST (and gRPC for a spell at a
// chosen slot level), the way a table plays it:
//
//   - an encounter in the Tavern: Brom swings at the goblin until he has
//     both missed and hit (SRD 5.1 "Making an Attack": the total against
//     the goblin's AC 15, damage only on a hit); turns wrap into round 2
//     and /last-round goes back to round 1;
//   - Aria casts Magic Missile at a second-level slot, and without slots
//     left is refused with the system's message rather than upcast;
//   - Aria drops to 0 hit points (a decrease stops at 0: the system's data
//     model), rolls death saves, and is healed, which clears the counters
//     (SRD 5.1 "Death Saving Throws");
//   - a short rest spends her hit dice with the system's default threshold
//     (3 missing hit points), each max(0, 1d6 + 2);
//   - Brom, exhausted, rolls Athletics with disadvantage (SRD 5.1
//     Appendix A, Exhaustion level 1), and the result says why.
func TestRulesAdventure(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	post := func(op, user string, params map[string]any, status int, want string) map[string]any {
		t.Helper()
		return expect(t, tr.dnd5eCall(http.MethodPost, op, user, params), status, op+"-result", want)
	}
	hp := func(uuid string) float64 {
		t.Helper()
		return jsonPath(tr.getDoc(t, uuid), "system.attributes.hp.value").(float64)
	}

	// The encounter.
	start := tr.write(http.MethodPost, "/start-encounter", map[string]any{"name": "Tavern brawl", "rollAll": true,
		"tokenUuids": []string{relaytest.TavernScene + ".Token.ariaToken0000001", relaytest.TavernScene + ".Token.bromToken0000001", relaytest.TavernScene + ".Token.goblinToken00001"}})
	encounterID := start["encounterId"].(string)
	enc := start["encounter"].(map[string]any)
	if len(enc["combatants"].([]any)) != 3 || enc["round"] != 1.0 {
		t.Fatalf("encounter %v", enc)
	}

	// Brom attacks the goblin (AC 15) with his longsword until he has
	// missed and hit.
	missed, hit := false, false
	for i := 0; i < 40 && !(missed && hit); i++ {
		u := post("use-item", "", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetUuid": relaytest.TavernScene + ".Token.goblinToken00001"}, http.StatusOK, "")
		roll := u["roll"].(map[string]any)
		damage := u["damageRolls"].([]any)
		natural := jsonPath(roll, "dice").([]any)[0].(map[string]any)["results"].([]any)[0].(map[string]any)["result"].(float64)
		wantHit := natural != 1 && (natural >= 19 || roll["total"].(float64) >= 15)
		if roll["hit"] != wantHit || (len(damage) > 0) != wantHit || jsonPath(roll, "rollMode.mode") != "normal" {
			t.Fatalf("attack %v (natural %v) with damage %v", roll, natural, damage)
		}
		missed, hit = missed || !wantHit, hit || wantHit
	}
	if !missed || !hit {
		t.Fatalf("40 attacks: missed %v, hit %v", missed, hit)
	}
	// Without a token of that name on the scene, the swing has no target.
	u := post("use-item", "", map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetName": "Nobody"}, http.StatusOK, "")
	if u["target"] != nil || jsonPath(u, "roll.hit") != nil || len(u["damageRolls"].([]any)) != 1 {
		t.Fatalf("no target: %v", u)
	}

	// Turns wrap into round 2; /last-round goes back to round 1, and from
	// round 1 there is no round before.
	for range 3 {
		tr.write(http.MethodPost, "/next-turn", map[string]any{"encounterId": encounterID})
	}
	if r := tr.write(http.MethodPost, "/last-turn", map[string]any{"encounterId": encounterID}); r["currentRound"] != 1.0 || r["currentTurn"] != 2.0 {
		t.Fatalf("last-turn from round 2's first turn: %v", r)
	}
	tr.write(http.MethodPost, "/next-round", map[string]any{"encounterId": encounterID})
	if r := tr.write(http.MethodPost, "/last-round", map[string]any{"encounterId": encounterID}); r["currentRound"] != 1.0 || r["currentTurn"] != 0.0 {
		t.Fatalf("last-round from round 2: %v", r)
	}
	if r := tr.Do(http.MethodPost, "/last-round", tr.AdminKey, nil, map[string]any{"encounterId": encounterID}); r.Status != http.StatusBadRequest {
		t.Fatalf("last-round from round 1: %d %s", r.Status, r.Body)
	}

	// Aria casts Magic Missile: her two first-level slots, then a
	// second-level one only when asked (over gRPC too).
	for range 2 {
		post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Magic Missile"}, http.StatusOK, "")
	}
	post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Magic Missile"}, http.StatusBadRequest,
		"You have no available level 1 spell slots with which to cast Magic Missile.")
	s := post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Magic Missile", "slotLevel": 2}, http.StatusOK, "")
	if jsonPath(s, "consumed.spellSlot") != "spell2" || jsonPath(s, "consumed.slotLevel") != 2.0 {
		t.Fatalf("slot level 2: %v", s)
	}
	conn, ctx := tr.grpcClient(t)
	client := relayv1.NewDnd5EServiceClient(conn)
	level := int32(2)
	if _, err := client.UseSpell(ctx, &relayv1.UseSpellRequest{UserId: "Alice", ActorUuid: relaytest.AriaUUID, AbilityName: "Magic Missile", SlotLevel: &level}); err != nil {
		t.Fatal(err)
	}
	level = 0
	if _, err := client.UseSpell(ctx, &relayv1.UseSpellRequest{UserId: "Alice", ActorUuid: relaytest.AriaUUID, AbilityName: "Magic Missile", SlotLevel: &level}); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "slotLevel must be a spell slot level from 1 to 9, got 0") {
		t.Fatalf("slot level 0 over gRPC: %v", err)
	}
	post("use-spell", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Magic Missile", "slotLevel": "high"}, http.StatusBadRequest, "slotLevel")
	if v := jsonPath(tr.getDoc(t, relaytest.AriaUUID), "system.spells.spell2.value"); v != 1.0 {
		t.Fatalf("second-level slots left: %v", v)
	}

	// Aria drops to 0 (not below) and rolls death saves until the
	// counters show something.
	d := tr.write(http.MethodPost, "/decrease", map[string]any{"uuid": relaytest.AriaUUID, "attribute": "system.attributes.hp.value", "amount": 100})
	if d["newValue"] != 0.0 || hp(relaytest.AriaUUID) != 0 {
		t.Fatalf("decrease: %v", d)
	}
	for i := 0; i < 10; i++ {
		ds := post("death-save", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "createChatMessage": false}, http.StatusOK, "")
		if ds["stable"] == true {
			tr.setHP(relaytest.AriaUUID, 0) // a natural 20 brought her back: down again
			continue
		}
		if jsonPath(ds, "deathSaves.success").(float64)+jsonPath(ds, "deathSaves.failure").(float64) > 0 && ds["dead"] != true {
			break
		}
	}
	doc := tr.getDoc(t, relaytest.AriaUUID)
	if jsonPath(doc, "system.attributes.death.success").(float64)+jsonPath(doc, "system.attributes.death.failure").(float64) == 0 {
		t.Fatalf("no death save counted: %v", jsonPath(doc, "system.attributes.death"))
	}
	// Healed: the counters clear.
	tr.write(http.MethodPost, "/increase", map[string]any{"uuid": relaytest.AriaUUID, "attribute": "system.attributes.hp.value", "amount": 5})
	doc = tr.getDoc(t, relaytest.AriaUUID)
	if jsonPath(doc, "system.attributes.hp.value") != 5.0 || jsonPath(doc, "system.attributes.death.success") != 0.0 || jsonPath(doc, "system.attributes.death.failure") != 0.0 {
		t.Fatalf("healed: %v", jsonPath(doc, "system.attributes"))
	}

	// A short rest with the default threshold spends her hit dice.
	r := post("short-rest", "Alice", map[string]any{"actorUuid": relaytest.AriaUUID, "autoHD": true}, http.StatusOK, "")
	rolls := jsonPath(r, "result.rolls").([]any)
	if jsonPath(r, "result.dhd").(float64) >= 0 || jsonPath(r, "result.dhp").(float64) <= 0 || len(rolls) == 0 || rolls[0].(map[string]any)["formula"] != "max(0, 1d6 + 2)" {
		t.Fatalf("short rest: %v", r)
	}
	if hp(relaytest.AriaUUID) != 5+jsonPath(r, "result.dhp").(float64) {
		t.Fatalf("hp after the rest %v", hp(relaytest.AriaUUID))
	}

	// Brom, exhausted, has disadvantage on Athletics, and is told why.
	tr.write(http.MethodPut, "/update", map[string]any{"uuid": relaytest.BromUUID, "data": map[string]any{"system.attributes.exhaustion": 1}})
	c := post("skill-check", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "skill": "ath", "createChatMessage": false}, http.StatusOK, "")
	if !strings.HasPrefix(c["formula"].(string), "2d20kl + 4 + 3") || jsonPath(c, "rollMode.mode") != "disadvantage" ||
		!reflect.DeepEqual(jsonPath(c, "rollMode.disadvantage"), []any{"Exhaustion 1"}) {
		t.Fatalf("exhausted athletics: %v", c)
	}
	// Asking for advantage cancels it out.
	c = post("skill-check", "Bob", map[string]any{"actorUuid": relaytest.BromUUID, "skill": "ath", "advantage": true, "createChatMessage": false}, http.StatusOK, "")
	if !strings.HasPrefix(c["formula"].(string), "1d20 + ") || jsonPath(c, "rollMode.mode") != "normal" {
		t.Fatalf("advantage and exhaustion: %v", c)
	}
}

// TestRulesRefuseBadValues: bad input through the document doors is
// refused with 400 naming the field and changes nothing; /give refuses
// more than the giver holds.
func TestRulesRefuseBadValues(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	before := tr.getDoc(t, relaytest.BromUUID)
	for _, tt := range []struct {
		data map[string]any
		want string
	}{
		{map[string]any{"system.attributes.hp.value": "lots"}, `system.attributes.hp.value must be an integer, got "lots"`},
		{map[string]any{"system.abilities.str.value": true}, "system.abilities.str.value must be an integer, got true"},
		{map[string]any{"system.attributes.hp": 3}, "system.attributes.hp must be an object, got 3"},
	} {
		r := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", relaytest.BromUUID), map[string]any{"data": tt.data})
		if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), tt.want) {
			t.Fatalf("%v: %d %s", tt.data, r.Status, r.Body)
		}
	}
	tr.unchanged(t, relaytest.BromUUID, before, "refused updates")
	// Numeric text is the number it holds, and /increase works on it.
	tr.write(http.MethodPut, "/update", map[string]any{"uuid": relaytest.BromUUID, "data": map[string]any{"system.attributes.hp.value": "30"}})
	if inc := tr.write(http.MethodPost, "/increase", map[string]any{"uuid": relaytest.BromUUID, "attribute": "system.attributes.hp.value", "amount": 2}); inc["newValue"] != 32.0 {
		t.Fatalf("increase: %v", inc)
	}
	// Brom has one potion: giving two is refused and nothing moves.
	brom, aria := tr.getDoc(t, relaytest.BromUUID), tr.getDoc(t, relaytest.AriaUUID)
	r := tr.Do(http.MethodPost, "/give", tr.AdminKey, nil, map[string]any{"fromUuid": relaytest.BromUUID, "toUuid": relaytest.AriaUUID, "itemName": "Potion of Healing", "quantity": 2})
	if r.Status != http.StatusBadRequest || !strings.Contains(r.ErrorText(t), "Insufficient quantity of Potion of Healing: the source has 1, cannot give 2") {
		t.Fatalf("give: %d %s", r.Status, r.Body)
	}
	tr.unchanged(t, relaytest.BromUUID, brom, "a refused give")
	tr.unchanged(t, relaytest.AriaUUID, aria, "a refused give")
	// His longsword arrives unequipped.
	g := tr.write(http.MethodPost, "/give", map[string]any{"fromUuid": relaytest.BromUUID, "toUuid": relaytest.AriaUUID, "itemName": "Longsword"})
	sword := tr.getDoc(t, g["newItemUuid"].(string))
	if jsonPath(sword, "system.equipped") != false {
		t.Fatalf("given sword %v", sword["system"])
	}
}
