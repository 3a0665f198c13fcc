package combat

import (
	"cmp"
	"context"
	"slices"

	"github.com/tabletop-relay/relay/world"
)

// List returns the world's encounters in the order they were started, as
// user may see them: the read rules of a single read apply to each combat
// (by default everyone observes combats; one the user cannot see is left
// out, one they see LIMITED shows only its id and name), and a non-GM
// user sees a hidden combatant only when they own its actor; Turn still
// indexes the full initiative order.
func (m *Manager) List(ctx context.Context, eng *world.Engine, user *world.User) ([]Encounter, error) {
	out := []Encounter{}
	err := eng.View(ctx, func(v *world.View) error {
		var docs []world.Document
		v.Each(combatName, func(doc world.Document) bool {
			docs = append(docs, doc)
			return true
		})
		slices.SortFunc(docs, func(a, b world.Document) int {
			sa, _ := a["sort"].(float64)
			sb, _ := b["sort"].(float64)
			if c := cmp.Compare(sa, sb); c != 0 {
				return c
			}
			if c := cmp.Compare(createdTime(a), createdTime(b)); c != 0 {
				return c
			}
			return cmp.Compare(str(a["_id"]), str(b["_id"]))
		})
		for _, doc := range docs {
			id := str(doc["_id"])
			switch level, _ := v.ReadLevel(user, combatName+"."+id); level {
			case world.LevelNone:
				continue
			case world.LevelLimited:
				out = append(out, Encounter{ID: id, Name: str(doc["name"]), Combatants: []Combatant{}})
				continue
			}
			out = append(out, summarize(v, doc, user))
		}
		return nil
	})
	return out, err
}

// createdTime is a document's creation stamp in milliseconds, 0 when absent.
func createdTime(doc world.Document) float64 {
	t, _ := world.Property(doc, "_stats.createdTime")
	n, _ := t.(float64)
	return n
}

// summarize describes a combat as user may see it (nil: everything).
func summarize(v *world.View, combat world.Document, user *world.User) Encounter {
	ord := order(v, combat)
	e := Encounter{
		ID:         str(combat["_id"]),
		Name:       str(combat["name"]),
		Round:      intField(combat, "round"),
		Turn:       clampTurn(intField(combat, "turn"), len(ord)),
		Current:    combat["active"] == true,
		Started:    combat["started"] == true,
		Combatants: make([]Combatant, 0, len(ord)),
	}
	for _, c := range ord {
		if c["hidden"] == true && !user.IsGM() && !ownsActor(v, user, c) {
			continue
		}
		e.Combatants = append(e.Combatants, toCombatant(c))
	}
	return e
}

// hiddenFrom reports whether a combatant is hidden from a non-GM user: a
// hidden one whose actor they do not own.
func hiddenFrom(v *world.View, user *world.User, c world.Document) bool {
	return c["hidden"] == true && !ownsActor(v, user, c)
}

// ownsActor reports whether user owns a combatant's actor.
func ownsActor(v *world.View, user *world.User, c world.Document) bool {
	uuid := actorUUID(c)
	if uuid == "" {
		return false
	}
	level, err := v.Level(user, uuid)
	return err == nil && level >= world.LevelOwner
}

// toCombatant converts a combatant document.
func toCombatant(c world.Document) Combatant {
	out := Combatant{
		ID:        str(c["_id"]),
		Name:      str(c["name"]),
		TokenUUID: tokenUUID(c),
		ActorUUID: actorUUID(c),
		Img:       str(c["img"]),
		Hidden:    c["hidden"] == true,
		Defeated:  defeated(c),
	}
	if n, ok := c["initiative"].(float64); ok {
		out.Initiative = &n
	}
	return out
}
