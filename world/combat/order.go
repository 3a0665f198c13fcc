package combat

import (
	"math"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// ranked is a combatant with what its place in the order depends on.
type ranked struct {
	doc        world.Document
	initiative float64 // -Inf until rolled, so it sorts last
	name       string
	id         string
}

// order returns a combat's combatants in the tabletop's turn order:
// highest initiative first (not rolled last), ties broken by name
// (case-insensitively, then exactly), then by id. Dexterity breaks ties
// only through the world setting `dnd5e.initiativeDexTiebreaker`, which,
// as in the system, adds a hundredth of the dexterity score to each
// initiative rolled.
func order(v *world.View, combat world.Document) []world.Document {
	list := combatants(combat)
	rs := make([]ranked, 0, len(list))
	for _, d := range list {
		c, _ := d.(map[string]any)
		if c == nil {
			continue
		}
		r := ranked{doc: c, initiative: math.Inf(-1), name: str(c["name"]), id: str(c["_id"])}
		if n, ok := c["initiative"].(float64); ok {
			r.initiative = n
		}
		rs = append(rs, r)
	}
	slices.SortStableFunc(rs, func(a, b ranked) int {
		if a.initiative != b.initiative {
			return cmpDesc(a.initiative, b.initiative)
		}
		if c := strings.Compare(strings.ToLower(a.name), strings.ToLower(b.name)); c != 0 {
			return c
		}
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := make([]world.Document, len(rs))
	for i, r := range rs {
		out[i] = r.doc
	}
	return out
}

// cmpDesc orders larger numbers first.
func cmpDesc(a, b float64) int {
	if a > b {
		return -1
	}
	return 1
}

// defeated reports whether a combatant is out of the fight.
func defeated(c world.Document) bool { return c["defeated"] == true }

// firstActive is the index of the first combatant not defeated, or 0.
func firstActive(ord []world.Document) int {
	for i, c := range ord {
		if !defeated(c) {
			return i
		}
	}
	return 0
}

// lastActive is the index of the last combatant not defeated, or 0.
func lastActive(ord []world.Document) int {
	for i := len(ord) - 1; i >= 0; i-- {
		if !defeated(ord[i]) {
			return i
		}
	}
	return 0
}

// clampTurn returns a stored turn as a valid index into an order of n
// combatants (0 when there are none).
func clampTurn(turn, n int) int {
	if turn >= n {
		turn = n - 1
	}
	return max(turn, 0)
}

// tokenUUID is the uuid of a combatant's token, or "".
func tokenUUID(c world.Document) string {
	scene, token := str(c["sceneId"]), str(c["tokenId"])
	if scene == "" || token == "" {
		return ""
	}
	return "Scene." + scene + ".Token." + token
}

// actorUUID is the uuid of a combatant's actor, or "".
func actorUUID(c world.Document) string {
	if id := str(c["actorId"]); id != "" {
		return "Actor." + id
	}
	return ""
}

// actorProperty reads a property of the actor a combatant stands for: from
// an unlinked token's own changes (`delta`) first, then from the actor.
// Missing is nil.
func actorProperty(v *world.View, c world.Document, path string) any {
	if uuid := tokenUUID(c); uuid != "" {
		if token, err := v.Get(uuid); err == nil && token["actorLink"] != true {
			if delta, ok := token["delta"].(map[string]any); ok {
				if val, ok := world.Property(delta, path); ok {
					return val
				}
			}
		}
	}
	if uuid := actorUUID(c); uuid != "" {
		if actor, err := v.Get(uuid); err == nil {
			if val, ok := world.Property(actor, path); ok {
				return val
			}
		}
	}
	return nil
}

// initiativeBonus is what a combatant adds to its d20: the dexterity
// modifier plus `system.attributes.init.bonus` when that is a number (or
// text holding one).
func initiativeBonus(v *world.View, c world.Document) float64 {
	bonus := 0.0
	if dex, ok := number(actorProperty(v, c, "system.abilities.dex.value")); ok {
		bonus += math.Floor((dex - 10) / 2)
	}
	if extra, ok := number(actorProperty(v, c, "system.attributes.init.bonus")); ok {
		bonus += extra
	}
	return bonus
}

// dexTiebreaker is the fifth-edition world setting that breaks initiative
// ties by dexterity.
const dexTiebreaker = "dnd5e.initiativeDexTiebreaker"

// roll sets the initiative of the combatants that have none and that
// choose selects: a d20 plus their initiative bonus, plus, with the world
// setting dexTiebreaker, a hundredth of their dexterity score (the
// system's tiebreaker, `@abilities.dex.value / 100`).
func (m *Manager) roll(eng *world.Engine, v *world.View, list []any, choose func(c world.Document) bool) {
	tiebreak := eng.Setting(dexTiebreaker) == true
	for _, d := range list {
		c := d.(map[string]any)
		if c["initiative"] != nil || !choose(c) {
			continue
		}
		init := float64(m.dice(20)) + initiativeBonus(v, c)
		if dex, ok := number(actorProperty(v, c, "system.abilities.dex.value")); ok && tiebreak {
			init += dex / 100
		}
		c["initiative"] = init
	}
}

// hasPlayerOwner reports whether a non-GM user owns a combatant's actor.
func hasPlayerOwner(v *world.View, c world.Document) bool {
	uuid := actorUUID(c)
	if uuid == "" {
		return false
	}
	owned := false
	v.Each("User", func(doc world.Document) bool {
		role, _ := doc["role"].(float64)
		u := &world.User{ID: str(doc["_id"]), Name: str(doc["name"]), Role: world.Role(role)}
		if u.IsGM() {
			return true
		}
		if level, err := v.Level(u, uuid); err == nil && level >= world.LevelOwner {
			owned = true
			return false
		}
		return true
	})
	return owned
}
