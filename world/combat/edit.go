package combat

import (
	"context"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// Add adds tokens (or actors, as their token on the active scene) to an
// encounter, the active one when p.EncounterID is empty. Each uuid needs
// OWNER on its actor (`add to encounter`); one that cannot be added is
// reported in Failed with the reason and the others are still added. With
// p.Selected the selected tokens not yet in the encounter are added too.
// With p.RollInitiative the added combatants roll initiative. The current
// combatant keeps its turn.
func (m *Manager) Add(ctx context.Context, eng *world.Engine, user *world.User, p MembersParams) (MembersResult, error) {
	return editMembers(ctx, eng, user, p, func(tx *world.Tx, v *world.View, _ string, list []any, selected []world.SelectedToken, res *MembersResult) ([]any, bool) {
		var added []any
		try := func(given, tokenUUID string, token world.Document, quiet bool) {
			// A combatant hidden from the user is, for them, not
			// there: they learn of it only through the permission
			// check (which they fail, not owning its actor).
			if i := indexOfToken(list, tokenUUID); i >= 0 && (user.IsGM() || !hiddenFrom(v, user, list[i].(map[string]any))) {
				if !quiet {
					res.Failed = append(res.Failed, Failed{UUID: given, Reason: "Already in the encounter"})
				}
				return
			}
			c := newCombatant(tx, tokenUUID, token)
			if err := requireControl(v, user, c, "add to encounter"); err != nil {
				res.Failed = append(res.Failed, Failed{UUID: given, Reason: err.Error()})
				return
			}
			if indexOfToken(list, tokenUUID) >= 0 {
				return // hidden, and still not theirs to add twice
			}
			list = append(list, c)
			added = append(added, c)
			res.Done = append(res.Done, given)
		}
		for _, given := range p.UUIDs {
			tokenUUID, token, err := resolveToken(v, given)
			if err != nil {
				res.Failed = append(res.Failed, Failed{UUID: given, Reason: err.Error()})
				continue
			}
			try(given, tokenUUID, token, false)
		}
		for _, s := range selected {
			if token, err := v.Get(s.TokenUUID); err == nil {
				try(s.TokenUUID, s.TokenUUID, token, true)
			}
		}
		if len(added) == 0 {
			return list, false
		}
		if p.RollInitiative {
			m.roll(eng, v, added, func(world.Document) bool { return true })
		}
		return list, true
	})
}

// Remove removes combatants from an encounter, the active one when
// p.EncounterID is empty: a token uuid removes that token's combatant, an
// actor uuid every combatant of that actor, a combatant uuid
// (`Combat.<id>.Combatant.<id>`) that combatant. Each needs OWNER on the
// combatant's actor (`remove from encounter`); a uuid that cannot be
// removed is reported in Failed. With p.Selected the combatants of the
// selected tokens go too. The current combatant keeps its turn; when it is
// removed, the next one takes it.
func (m *Manager) Remove(ctx context.Context, eng *world.Engine, user *world.User, p MembersParams) (MembersResult, error) {
	return editMembers(ctx, eng, user, p, func(_ *world.Tx, v *world.View, uuid string, list []any, selected []world.SelectedToken, res *MembersResult) ([]any, bool) {
		removed := 0
		drop := func(given string, match func(c world.Document) bool, quiet bool) {
			// Only the combatants the user sees can match: a hidden
			// one is, for others, not there.
			var matched []int
			for i, d := range list {
				if c := d.(map[string]any); match(c) && (user.IsGM() || !hiddenFrom(v, user, c)) {
					matched = append(matched, i)
				}
			}
			if len(matched) == 0 {
				if !quiet {
					res.Failed = append(res.Failed, Failed{UUID: given, Reason: "No combatant found for this entity"})
				}
				return
			}
			for _, i := range matched {
				if err := requireControl(v, user, list[i].(map[string]any), "remove from encounter"); err != nil {
					res.Failed = append(res.Failed, Failed{UUID: given, Reason: err.Error()})
					return
				}
			}
			for _, i := range slices.Backward(matched) {
				list = slices.Delete(list, i, i+1)
			}
			removed += len(matched)
			res.Done = append(res.Done, given)
		}
		for _, given := range p.UUIDs {
			drop(given, matcher(uuid, given), false)
		}
		for _, s := range selected {
			drop(s.TokenUUID, matcher(uuid, s.TokenUUID), true)
		}
		return list, removed > 0
	})
}

// membersEdit changes the combatant list of one encounter inside its
// transaction, recording what it did in res; it returns the new list and
// whether anything changed.
type membersEdit func(tx *world.Tx, v *world.View, combatUUID string, list []any, selected []world.SelectedToken, res *MembersResult) ([]any, bool)

// editMembers runs an Add or a Remove: it finds the encounter and the
// selection, hands the edit a private copy of the combatant list, and writes
// the list back in the same transaction when the edit changed it. The user
// must observe the encounter (its combatants are its data): one named by id
// that they see less is a permission error (as a single read), and the
// active encounter is not found when they cannot see it.
func editMembers(ctx context.Context, eng *world.Engine, user *world.User, p MembersParams, edit membersEdit) (MembersResult, error) {
	selected, err := selection(ctx, eng, p.Selected)
	if err != nil {
		return MembersResult{}, err
	}
	res := MembersResult{Done: []string{}, Failed: []Failed{}}
	err = eng.Mutate(ctx, func(tx *world.Tx) error {
		res.Done, res.Failed = res.Done[:0], res.Failed[:0]
		v := tx.View()
		uuid, stored, err := findCombat(v, p.EncounterID)
		if err != nil {
			return err
		}
		if err := v.RequireLevel(user, uuid, world.LevelObserver, "view encounter"); err != nil {
			if p.EncounterID == "" {
				return world.Errorf(world.ErrNotFound, "No active encounter")
			}
			return err
		}
		res.EncounterID = str(stored["_id"])
		combat, err := tx.Get(uuid)
		if err != nil {
			return err
		}
		list, changed := edit(tx, v, uuid, slices.Clone(combatants(combat)), selected, &res)
		if !changed {
			return nil
		}
		return rewrite(tx, uuid, combat, list)
	})
	if err != nil {
		return MembersResult{}, err
	}
	return res, nil
}

// matcher returns what a uuid given to Remove selects among a combat's
// combatants.
func matcher(combatUUID, given string) func(c world.Document) bool {
	parts := strings.Split(given, ".")
	switch {
	case len(parts) == 4 && parts[0] == "Scene" && parts[2] == "Token":
		return func(c world.Document) bool { return sameToken(c, given) }
	case len(parts) == 2 && parts[0] == "Actor":
		return func(c world.Document) bool { return c["actorId"] == parts[1] }
	case strings.HasPrefix(given, combatUUID+"."+combatantName+".") && len(parts) == 4:
		return func(c world.Document) bool { return c["_id"] == parts[3] }
	}
	return func(world.Document) bool { return false }
}

// selection reads the world's selected tokens when asked to. The selection
// belongs to the world, not to a user, so it is read with GM-level access;
// every token taken from it is then checked against the caller.
func selection(ctx context.Context, eng *world.Engine, want bool) ([]world.SelectedToken, error) {
	if !want {
		return nil, nil
	}
	return eng.Selected(ctx, nil)
}

// rewrite stores a combat with a new list of combatants, keeping the
// current combatant's turn: when it is still there its new index, else the
// index of the first combatant after it that is.
func rewrite(tx *world.Tx, uuid string, combat world.Document, list []any) error {
	v := tx.View()
	before := order(v, combat)
	turn := clampTurn(intField(combat, "turn"), len(before))
	combat[combatantsField] = list
	after := order(v, combat)
	next := -1
	if len(before) == 0 {
		next = firstActive(after)
	}
	for i := turn; i < len(before) && next < 0; i++ {
		id := before[i]["_id"]
		for j, c := range after {
			if c["_id"] == id {
				next = j
				break
			}
		}
	}
	if next < 0 {
		next = clampTurn(len(after)-1, len(after))
	}
	combat["turn"] = float64(next)
	return tx.Put(uuid, combat)
}
