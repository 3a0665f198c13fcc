package dnd5e

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
)

// itemSourceKeys are the fields of an item's source object in the details.
var itemSourceKeys = []string{"_id", "name", "type", "img", "system", "effects", "folder", "sort", "ownership", "flags", "_stats"}

// ActorDetails returns the requested details of an actor (`resources`,
// `items`, `spells` with `spellSlots`, `features`, `stats`, `abilities`,
// `skills`, `details`, `conditions` with `concentration`). Unknown names
// are ignored; an empty list is an error. The user needs OBSERVER on the
// actor: LIMITED shows a name and an image, not a sheet.
func (r *Rules) ActorDetails(ctx context.Context, e *world.Engine, user *world.User, actorUUID string, details []string) (Details, error) {
	if actorUUID == "" {
		return Details{}, world.Errorf(world.ErrInvalid, "actorUuid is required")
	}
	if len(details) == 0 {
		return Details{}, world.Errorf(world.ErrInvalid, "details array is required and cannot be empty")
	}
	out := Details{UUID: actorUUID}
	err := e.View(ctx, func(v *world.View) error {
		uuid, doc, err := actorByUUID(v, actorUUID)
		if err != nil {
			return err
		}
		if err := requireView(v, user, uuid); err != nil {
			return err
		}
		a := deriveFor(v, user, uuid, doc)
		for _, d := range details {
			switch d {
			case "resources":
				res := at(doc, "system.resources")
				if res == nil {
					res = map[string]any{}
				}
				out.Resources = world.Clone(world.Document{"r": res})["r"]
			case "items":
				out.Items = itemSources(a, ofType(inventoryTypes...))
			case "spells", "spellSlots":
				out.Spells = itemSources(a, ofType("spell"))
				out.SpellSlots = spellSlots(a)
			case "features":
				out.Features = itemSources(a, ofType(featureTypes...))
			case "stats":
				out.Stats = stats(a)
			case "abilities":
				out.Abilities = abilities(a)
			case "skills":
				out.Skills = skills(a)
			case "details":
				out.Info = biography(a)
			case "conditions":
				out.Conditions, out.Concentration = conditions(a)
			}
		}
		return a.refused()
	})
	if err != nil {
		return Details{}, err
	}
	return out, nil
}

// itemSources returns the actor's items that pass keep, as private copies
// of their source objects.
func itemSources(a *actor, keep func(world.Document) bool) []any {
	out := []any{}
	for _, it := range a.items {
		if !keep(it) {
			continue
		}
		src := world.Document{}
		for _, k := range itemSourceKeys {
			if v, ok := it[k]; ok {
				src[k] = v
			}
		}
		out = append(out, world.Clone(src))
	}
	return out
}

// slotMax is a spell slot level's maximum: its override when set.
func slotMax(slot map[string]any) int {
	if o, ok := num(slot["override"]); ok {
		return int(o)
	}
	return int(numOr(slot["max"], 0))
}

// spellSlots lists the slot levels the actor has: `spell1`..`spell9` with
// `{value, max}` and `pact` with `{value, max, level}`.
func spellSlots(a *actor) map[string]any {
	out := map[string]any{}
	for i := 1; i <= 9; i++ {
		slot := obj(at(a.system, fmt.Sprintf("spells.spell%d", i)))
		if m := slotMax(slot); m > 0 {
			out[fmt.Sprintf("spell%d", i)] = map[string]any{"value": numOr(slot["value"], 0), "max": float64(m)}
		}
	}
	pact := obj(at(a.system, "spells.pact"))
	if m := slotMax(pact); m > 0 {
		out["pact"] = map[string]any{"value": numOr(pact["value"], 0), "max": float64(m), "level": float64(pactLevel(a, pact))}
	}
	return out
}

// pactLevel is the level of pact slots: stored, else from warlock levels.
func pactLevel(a *actor, pact map[string]any) int {
	if l, ok := num(pact["level"]); ok && l > 0 {
		return int(l)
	}
	for _, it := range a.items {
		if str(it["type"]) == "class" && str(at(it, "system.spellcasting.progression")) == "pact" {
			return min(5, (int(numOr(at(it, "system.levels"), 1))+1)/2)
		}
	}
	return 1
}

// armorClass computes the actor's armour class the system's way: `flat`
// is the flat value and nothing else; every other calculation is a base
// (natural armour's flat value, 13 + DEX for mage armour and draconic
// resilience, the unarmoured defences, the `custom` formula, or by default
// the worn armour with its DEX cap, 10 + DEX without) plus an equipped
// shield plus the AC bonus. The custom formula reads the roll data and
// `@attributes.ac.armor`, `@attributes.ac.dex` and `@attributes.ac.shield`;
// one that does not evaluate to a number without dice counts as the
// default calculation.
func armorClass(a *actor) int {
	ac := obj(at(a.system, "attributes.ac"))
	if str(ac["calc"]) == "flat" {
		return int(numOr(ac["flat"], 10))
	}
	dex := a.mods["dex"]
	armor, armorDex, shield := 10, dex, 0
	for _, it := range a.items {
		if str(it["type"]) != "equipment" || at(it, "system.equipped") != true {
			continue
		}
		value := int(numOr(at(it, "system.armor.value"), 0)) + int(numOr(at(it, "system.armor.magicalBonus"), 0))
		switch kind := str(at(it, "system.type.value")); kind {
		case "shield":
			shield = max(shield, value)
		case "light", "medium", "heavy":
			armor, armorDex = value, dex
			if c, ok := num(at(it, "system.armor.dex")); ok {
				armorDex = min(dex, int(c))
			}
			if kind == "heavy" {
				armorDex = 0
			}
		}
	}
	base := armor + armorDex
	switch str(ac["calc"]) {
	case "natural":
		base = int(numOr(ac["flat"], 10))
	case "mage", "draconic":
		base = 13 + dex
	case "unarmoredMonk":
		base = 10 + dex + a.mods["wis"]
	case "unarmoredBarb":
		base = 10 + dex + a.mods["con"]
	case "unarmoredBard":
		base = 10 + dex + a.mods["cha"]
	case "custom":
		parts := map[string]any{"attributes.ac.armor": float64(armor), "attributes.ac.dex": float64(armorDex), "attributes.ac.shield": float64(shield)}
		r, err := dice.EvaluateWith(str(ac["formula"]), func(path string) (any, error) {
			if v, ok := parts[path]; ok {
				return v, nil
			}
			return a.resolve(path)
		}, dice.NewSequence())
		if err == nil && len(r.Dice) == 0 {
			base = int(math.Floor(r.Total))
		}
	}
	return base + shield + a.fixed(str(ac["bonus"]))
}

// stats is the `stats` detail.
func stats(a *actor) map[string]any {
	hp := obj(at(a.system, "attributes.hp"))
	weight := 0.0
	for _, it := range a.items {
		w := at(it, "system.weight.value")
		if w == nil {
			w = at(it, "system.weight")
		}
		weight += numOr(w, 0) * numOr(at(it, "system.quantity"), 1)
	}
	currency := obj(at(a.system, "currency"))
	if currency == nil {
		currency = map[string]any{}
	}
	return map[string]any{
		"name":         a.name(),
		"img":          a.doc["img"],
		"uuid":         a.uuid,
		"level":        float64(a.level),
		"profBonus":    float64(a.prof),
		"ac":           float64(armorClass(a)),
		"hp":           map[string]any{"value": numOr(hp["value"], 0), "max": float64(a.maxHP()), "temp": numOr(hp["temp"], 0)},
		"speed":        a.speed(),
		"exhaustion":   numOr(at(a.system, "attributes.exhaustion"), 0),
		"inspiration":  at(a.system, "attributes.inspiration") == true,
		"initBonus":    float64(a.mods["dex"] + a.fixed(str(at(a.system, "attributes.init.bonus")))),
		"deathSaves":   map[string]any{"success": numOr(at(a.system, "attributes.death.success"), 0), "failure": numOr(at(a.system, "attributes.death.failure"), 0)},
		"encumbrance":  map[string]any{"value": math.Round(weight*100) / 100, "max": numOr(at(a.system, "abilities.str.value"), 10) * 15},
		"currency":     world.Clone(world.Document{"c": currency})["c"],
		"spellDC":      float64(a.spellDC()),
		"spellAbility": a.spellcastingAbility(),
	}
}

// abilities is the `abilities` detail.
func abilities(a *actor) map[string]any {
	out := map[string]any{}
	for _, ab := range abilityKeys {
		s := a.save(ab)
		prof := 0.0
		if s.proficient {
			prof = 1
		}
		out[ab] = map[string]any{
			"value":      numOr(at(a.system, "abilities."+ab+".value"), 10),
			"mod":        float64(a.mods[ab]),
			"save":       float64(s.total),
			"proficient": prof,
		}
	}
	return out
}

// skills is the `skills` detail.
func skills(a *actor) map[string]any {
	out := map[string]any{}
	for _, key := range skillKeys {
		s := a.skill(key)
		out[key] = map[string]any{
			"ability": s.ability,
			"total":   float64(s.total),
			"mod":     float64(s.mod),
			"value":   s.multiplier,
			"passive": float64(s.passive),
		}
	}
	return out
}

// biography is the `details` detail.
func biography(a *actor) map[string]any {
	firstOf := func(typ string) string {
		for _, it := range a.items {
			if str(it["type"]) == typ {
				return str(it["name"])
			}
		}
		return "?"
	}
	var classes []string
	for _, it := range a.items {
		if str(it["type"]) == "class" {
			classes = append(classes, str(it["name"]))
		}
	}
	class := strings.Join(classes, "/")
	if class == "" {
		class = "?"
	}
	d := obj(at(a.system, "details"))
	raw := func(k string) any {
		if v, ok := d[k]; ok && v != nil {
			if _, isObj := v.(map[string]any); !isObj {
				return v
			}
		}
		return ""
	}
	out := map[string]any{
		"race": firstOf("race"), "background": firstOf("background"), "class": class,
		"biography": str(at(d, "biography.value")),
		"level":     float64(a.level),
		"xp":        at(d, "xp.value"),
	}
	if notes := obj(d["notes"]); notes != nil {
		out["notes"] = str(notes["value"])
	} else {
		out["notes"] = raw("notes")
	}
	for _, k := range []string{"alignment", "age", "height", "weight", "eyes", "skin", "hair", "faith", "gender", "trait", "ideal", "bond", "flaw", "journal", "goals"} {
		out[k] = raw(k)
	}
	return out
}

// conditionNames are the system's status conditions.
var conditionNames = map[string]string{
	"blinded": "Blinded", "charmed": "Charmed", "deafened": "Deafened", "exhaustion": "Exhaustion",
	"frightened": "Frightened", "grappled": "Grappled", "incapacitated": "Incapacitated", "invisible": "Invisible",
	"paralyzed": "Paralyzed", "petrified": "Petrified", "poisoned": "Poisoned", "prone": "Prone",
	"restrained": "Restrained", "stunned": "Stunned", "unconscious": "Unconscious", "dead": "Dead",
	"concentrating": "Concentrating", "bleeding": "Bleeding", "burrowing": "Burrowing", "dodging": "Dodging",
	"flying": "Flying", "hiding": "Hiding", "marked": "Marked", "silenced": "Silenced", "stable": "Stable",
	"surprised": "Surprised", "transformed": "Transformed", "cursed": "Cursed", "diseased": "Diseased",
}

// conditions is the `conditions` detail: the statuses of the actor's
// enabled effects, exhaustion with its level when the actor has some (and
// death at level 6, SRD 5.1 Appendix A), and its concentration.
func conditions(a *actor) ([]any, map[string]any) {
	ids := a.statuses()
	ex := a.exhaustion()
	if ex > 0 && !slices.Contains(ids, "exhaustion") {
		ids = append(ids, "exhaustion")
	}
	if ex >= 6 && !slices.Contains(ids, "dead") {
		ids = append(ids, "dead")
	}
	out := []any{}
	for _, id := range ids {
		name := conditionNames[id]
		if name == "" {
			name = id
		}
		c := map[string]any{"id": id, "name": name}
		if id == "exhaustion" {
			c["level"] = float64(ex)
		}
		out = append(out, c)
	}
	conc := map[string]any{"active": false}
	if eff := concentrationEffect(a.doc); eff != nil {
		conc = map[string]any{"active": true, "name": str(eff["name"])}
	}
	return out, conc
}
