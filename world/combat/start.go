package combat

import (
	"context"

	"github.com/tabletop-relay/relay/world"
)

// Start creates an encounter, makes it the world's active one (the others
// stop being active), adds its combatants, rolls the initiative asked for
// and starts it at round 1 with the first combatant able to act. GM only.
// A token uuid that cannot be resolved fails the whole start.
func (m *Manager) Start(ctx context.Context, eng *world.Engine, user *world.User, p StartParams) (Encounter, error) {
	if err := requireGM(user, "start encounters"); err != nil {
		return Encounter{}, err
	}
	var (
		selected []world.SelectedToken
		err      error
	)
	if p.WithSelected {
		// The selection is the world's; the caller is a GM, so read it
		// with GM-level access.
		if selected, err = eng.Selected(ctx, nil); err != nil {
			return Encounter{}, err
		}
	}
	name := p.Name
	if name == "" {
		name = defaultName
	}
	var out Encounter
	err = eng.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		list := []any{}
		add := func(uuid string, token world.Document) {
			if indexOfToken(list, uuid) < 0 {
				list = append(list, newCombatant(tx, uuid, token))
			}
		}
		for _, uuid := range p.TokenUUIDs {
			tokenUUID, token, err := resolveToken(v, uuid)
			if err != nil {
				return err
			}
			add(tokenUUID, token)
		}
		var sceneID any
		if scene, err := v.ActiveScene(); err == nil {
			sceneID = scene["_id"]
			if p.WithPlayers {
				prefix := "Scene." + str(scene["_id"]) + ".Token."
				tokens, _ := scene["tokens"].([]any)
				for _, d := range tokens {
					token := d.(map[string]any)
					probe := world.Document{"actorId": token["actorId"]}
					if str(token["actorId"]) != "" && hasPlayerOwner(v, probe) {
						add(prefix+str(token["_id"]), token)
					}
				}
			}
		} else if p.WithPlayers {
			return err
		}
		for _, s := range selected {
			if token, err := v.Get(s.TokenUUID); err == nil {
				add(s.TokenUUID, token)
			}
		}
		if p.RollAll || p.RollNPC {
			m.roll(eng, v, list, func(c world.Document) bool { return p.RollAll || !hasPlayerOwner(v, c) })
		}
		for _, uuid := range combatUUIDs(v, func(doc world.Document) bool { return doc["active"] == true }) {
			if _, err := tx.Update(uuid, world.Document{"active": false}); err != nil {
				return err
			}
		}
		data := world.Document{
			"name":          name,
			"round":         1.0,
			"turn":          0.0,
			"active":        true,
			"started":       true,
			"scene":         sceneID,
			combatantsField: list,
			"flags":         world.Document{},
			"sort":          nextSort(v),
		}
		data["turn"] = float64(firstActive(order(v, data)))
		uuid, err := tx.Create(combatName, "", data)
		if err != nil {
			return err
		}
		combat, err := tx.View().Get(uuid)
		if err != nil {
			return err
		}
		out = summarize(tx.View(), combat, nil)
		return nil
	})
	if err != nil {
		return Encounter{}, err
	}
	return out, nil
}

// End deletes an encounter (the active one when id is empty) and returns
// its id. GM only.
func (m *Manager) End(ctx context.Context, eng *world.Engine, user *world.User, id string) (string, error) {
	if err := requireGM(user, "end encounters"); err != nil {
		return "", err
	}
	var ended string
	err := eng.Mutate(ctx, func(tx *world.Tx) error {
		uuid, combat, err := findCombat(tx.View(), id)
		if err != nil {
			return err
		}
		ended = str(combat["_id"])
		return tx.Delete(uuid)
	})
	return ended, err
}

// nextSort is the `sort` of a new encounter: after every existing one, so
// encounters list in the order they were started.
func nextSort(v *world.View) float64 {
	last := 0.0
	v.Each(combatName, func(doc world.Document) bool {
		if n, ok := doc["sort"].(float64); ok && n > last {
			last = n
		}
		return true
	})
	return last + 1
}
