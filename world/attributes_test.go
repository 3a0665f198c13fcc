package world

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// deadEffects counts the effects with the dead status.
func deadEffects(effects []any) int {
	n := 0
	for _, e := range effects {
		if hasStatus([]any{e}, deadStatus) {
			n++
		}
	}
	return n
}

func combatant(t *testing.T, w Documents, id string) Document {
	t.Helper()
	return mustGet(t, w, combatUUID+".Combatant."+id)
}

func TestKillActorSetsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	for range 2 {
		res, err := tw.Kill(ctx, alice, actorOwner)
		want := KillResult{UUID: actorOwner, Message: "Actor marked as defeated, HP set to 0, and dead effect applied"}
		if err != nil || res != want {
			t.Fatalf("Kill = %+v, %v; want %+v", res, err, want)
		}
		hero := mustGet(t, tw, actorOwner)
		if hp := num(t, hero, "system.attributes.hp.value"); hp != 0 {
			t.Errorf("hp = %v", hp)
		}
		effects := hero["effects"].([]any)
		if deadEffects(effects) != 1 {
			t.Fatalf("effects = %v, want one dead effect", effects)
		}
		effect := effects[0].(Document)
		if effect["name"] != "Dead" || effect["img"] != "icons/svg/skull.svg" {
			t.Errorf("effect = %v", effect)
		}
		if combatant(t, tw, "Combatant0000001")["defeated"] != true {
			t.Error("the hero's combatant is not defeated")
		}
		if combatant(t, tw, "Combatant0000002")["defeated"] != false {
			t.Error("the goblin's combatant is defeated")
		}
	}
	if n := len(tw.log.all()); n != 1 {
		t.Errorf("%d commits, want 1: the second kill changes nothing", n)
	}

	_, err := tw.Kill(ctx, alice, actorObserver)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to kill 'Companion'")
	_, err = tw.Kill(ctx, nil, ropeUUID)
	wantError(t, err, ErrInvalid, "Cannot mark entity type Item as defeated")
	_, err = tw.Kill(ctx, nil, "Actor.Missing000000001")
	wantError(t, err, ErrNotFound, "Entity not found: Actor.Missing000000001")
}

func TestKillUnlinkedTokenLeavesItsActorAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	goblinBefore := mustGet(t, tw, actorNone)

	for range 2 {
		res, err := tw.Kill(ctx, nil, tokenGoblin)
		if err != nil || res.Message != "Token marked as defeated, HP set to 0, and dead effect applied" {
			t.Fatalf("Kill = %+v, %v", res, err)
		}
		token := mustGet(t, tw, tokenGoblin)
		if hp := num(t, token, "delta.system.attributes.hp.value"); hp != 0 {
			t.Errorf("token hp = %v", hp)
		}
		if effects, _ := Property(token, "delta.effects"); deadEffects(effects.([]any)) != 1 {
			t.Errorf("token effects = %v", effects)
		}
		if combatant(t, tw, "Combatant0000002")["defeated"] != true {
			t.Error("the goblin's combatant is not defeated")
		}
	}
	if diff := cmp.Diff(goblinBefore, mustGet(t, tw, actorNone)); diff != "" {
		t.Errorf("killing an unlinked token changed its actor:\n%s", diff)
	}
	if n := len(tw.log.all()); n != 1 {
		t.Errorf("%d commits, want 1", n)
	}
}

func TestKillLinkedTokenKillsItsActor(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	// Alice observes the scene only: its tokens are not hers to kill.
	_, err := tw.Kill(ctx, alice, tokenOwner)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to kill 'Hero'")

	if _, err := tw.Kill(ctx, nil, tokenOwner); err != nil {
		t.Fatal(err)
	}
	hero := mustGet(t, tw, actorOwner)
	if num(t, hero, "system.attributes.hp.value") != 0 || deadEffects(hero["effects"].([]any)) != 1 {
		t.Errorf("hero = %v", hero)
	}
	if combatant(t, tw, "Combatant0000001")["defeated"] != true {
		t.Error("the hero's combatant is not defeated")
	}
}
