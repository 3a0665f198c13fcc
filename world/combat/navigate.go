package combat

import (
	"context"

	"github.com/tabletop-relay/relay/world"
)

// gmActions are the GM-only operations' words in the permission error.
var gmActions = map[Action]string{
	NextTurn:      "advance encounter turns",
	NextRound:     "advance encounter rounds",
	PreviousTurn:  "revert encounter turns",
	PreviousRound: "revert encounter rounds",
}

// Navigate moves an encounter (the active one when id is empty) one turn
// or one round forwards or back. GM only.
//
//   - NextTurn goes to the next combatant not defeated; after the last one
//     the next round starts with the first one.
//   - PreviousTurn goes back to the previous combatant not defeated; before
//     the first one, to the last one of the previous round. Going back from
//     the first turn of round 1 is an error.
//   - NextRound and PreviousRound change the round and go to its first
//     combatant not defeated; there is no round before round 1.
//
// An encounter not started yet (round 0) starts at round 1 on a forward
// move.
func (m *Manager) Navigate(ctx context.Context, eng *world.Engine, user *world.User, id string, action Action) (Position, error) {
	gmAction, ok := gmActions[action]
	if !ok {
		return Position{}, world.Errorf(world.ErrInvalid, "Unknown encounter action: %s", action)
	}
	if err := requireGM(user, gmAction); err != nil {
		return Position{}, err
	}
	var pos Position
	err := eng.Mutate(ctx, func(tx *world.Tx) error {
		v := tx.View()
		uuid, combat, err := findCombat(v, id)
		if err != nil {
			return err
		}
		ord := order(v, combat)
		round, turn, err := move(ord, intField(combat, "round"), clampTurn(intField(combat, "turn"), len(ord)), action, str(combat["name"]))
		if err != nil {
			return err
		}
		if _, err := tx.Update(uuid, world.Document{"round": float64(round), "turn": float64(turn), "started": true}); err != nil {
			return err
		}
		after, err := tx.View().Get(uuid)
		if err != nil {
			return err
		}
		pos = Position{EncounterID: str(after["_id"]), Action: action, Round: round, Turn: turn, Encounter: summarize(tx.View(), after, nil)}
		if turn < len(ord) {
			pos.ActorUUID, pos.TokenUUID = actorUUID(ord[turn]), tokenUUID(ord[turn])
		}
		return nil
	})
	if err != nil {
		return Position{}, err
	}
	return pos, nil
}

// move computes the round and turn after an action, from the initiative
// order and the current round and turn.
func move(ord []world.Document, round, turn int, action Action, name string) (int, int, error) {
	if round < 1 && (action == NextTurn || action == NextRound) {
		return 1, firstActive(ord), nil
	}
	switch action {
	case NextTurn:
		if !anyActive(ord) {
			return 0, 0, world.Errorf(world.ErrFailedPrecondition, "Encounter '%s' has no combatant able to act", name)
		}
		for i := turn + 1; i < len(ord); i++ {
			if !defeated(ord[i]) {
				return round, i, nil
			}
		}
		return round + 1, firstActive(ord), nil
	case PreviousTurn:
		for i := turn - 1; i >= 0; i-- {
			if !defeated(ord[i]) {
				return round, i, nil
			}
		}
		if round <= 1 {
			return 0, 0, world.Errorf(world.ErrFailedPrecondition, "Encounter '%s' is at its first turn of round 1: there is no previous turn", name)
		}
		return round - 1, lastActive(ord), nil
	case NextRound:
		return round + 1, firstActive(ord), nil
	default: // PreviousRound
		if round <= 1 {
			return 0, 0, world.Errorf(world.ErrFailedPrecondition, "Encounter '%s' is in round 1: there is no previous round", name)
		}
		return round - 1, firstActive(ord), nil
	}
}

// anyActive reports whether some combatant is not defeated.
func anyActive(ord []world.Document) bool {
	for _, c := range ord {
		if !defeated(c) {
			return true
		}
	}
	return false
}
