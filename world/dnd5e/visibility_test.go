package dnd5e

import (
	"slices"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// The demo's levels used below: Alice owns Aria and observes Brom; Bob owns
// Brom and is LIMITED on Aria; the Goblin is NONE to both, the Town Guard
// LIMITED, Innkeeper Mara OBSERVER to everyone.
const (
	guard = "Actor.townGuard0000001"
	mara  = "Actor.innkeeperMara001"
)

// TestFormulaReferencesReadOnlyWhatTheUserMay: a formula's references,
// given by the caller or stored on the sheet, read only data the rolling
// user may read in full; anything else is a permission error, never a
// silent 0.
func TestFormulaReferencesReadOnlyWhatTheUserMay(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice, bob := f.user("Alice"), f.user("Bob")
	check := func(user *world.User, actor, bonus string) (RollResult, error) {
		f.roll(10)
		return f.rules.SkillCheck(f.ctx, f.e, user, CheckParams{ActorUUID: actor, Skill: "arc", Bonus: bonus})
	}

	// The roller's own actor, read in full: resolved (Aria has 21 HP).
	r := must(check(alice, aria, "@attributes.hp.value"))(t)
	if r.Formula != "1d20 + 4 + 3 + 21" {
		t.Fatalf("own reference: %q", r.Formula)
	}
	// Another document the user observes: resolved from its source data
	// (Brom has 38 HP).
	r = must(check(alice, aria, "@Actor.bromIronfist0001.system.attributes.hp.value"))(t)
	if r.Formula != "1d20 + 4 + 3 + 38" {
		t.Fatalf("observed actor: %q", r.Formula)
	}
	// A document the user cannot read in full: NONE, LIMITED, and an
	// embedded document of a NONE actor.
	for _, ref := range []string{
		"Actor.goblin0000000001.system.attributes.hp.value",
		"Actor.townGuard0000001.system.attributes.hp.value",
		"Actor.townGuard0000001.name",
		"Actor.goblin0000000001.Item.goblinScimitar01.system.damage.base.number",
	} {
		_, err := check(alice, aria, "1 + @"+ref)
		wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to read @"+ref+" in a roll formula")
	}
	// A GM reads everything (the Goblin has 7 HP).
	r = must(check(nil, aria, "@Actor.goblin0000000001.system.attributes.hp.value"))(t)
	if r.Formula != "1d20 + 4 + 3 + 7" {
		t.Fatalf("GM: %q", r.Formula)
	}
	// A reference to nothing is not found, as a single read would say.
	_, err := check(nil, aria, "@Actor.nobody0000000001.system.attributes.hp.value")
	wantErr(t, err, world.ErrNotFound, "Entity not found: Actor.nobody0000000001")
	// LIMITED on the actor rolled for: refused before any formula is read.
	_, err = check(bob, aria, "@attributes.hp.value")
	wantErr(t, err, world.ErrPermission, "User 'Bob' does not have permission to view actor 'Aria Vale'")

	// A formula stored on Alice's own sheet that reads the Goblin: every
	// operation evaluating it for Alice is refused; for the GM it counts.
	f.set(aria, world.Document{"system.bonuses.abilities.check": "@Actor.goblin0000000001.system.attributes.hp.value"})
	_, err = check(alice, aria, "")
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to read @Actor.goblin0000000001.system.attributes.hp.value in a roll formula")
	_, err = f.rules.ActorDetails(f.ctx, f.e, alice, aria, []string{"skills"})
	wantErr(t, err, world.ErrPermission, "in a roll formula")
	d := must(f.rules.ActorDetails(f.ctx, f.e, nil, aria, []string{"skills"}))(t)
	if got := d.Skills["arc"].(map[string]any)["total"]; got != 14.0 {
		t.Fatalf("GM: arcana total %v, want 7 + the Goblin's 7 HP", got)
	}
	if n := f.chatCount(); n != 0 {
		t.Fatalf("%d chat messages from checks without createChatMessage", n)
	}
}

// TestLookupsByNameFindOnlyWhatTheUserSees: an actor the user cannot see
// is "not found" by name, with the text of a name that matches nothing.
func TestLookupsByNameFindOnlyWhatTheUserSees(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice := f.user("Alice")

	for _, name := range []string{"Goblin", "Nobody"} {
		_, err := f.rules.GetConcentration(f.ctx, f.e, alice, ActorRef{Name: name})
		wantErr(t, err, world.ErrNotFound, "Actor not found: "+name)
		_, err = f.rules.TransferCurrency(f.ctx, f.e, alice, TransferParams{
			Source: ActorRef{UUID: aria}, Target: ActorRef{Name: name}, Amount: Currency{"gp": 1},
		})
		wantErr(t, err, world.ErrNotFound, "Actor not found: "+name)
		_, err = f.rules.EquipItem(f.ctx, f.e, alice, ActorRef{Name: name}, ItemRef{Name: "Scimitar"}, true)
		wantErr(t, err, world.ErrNotFound, "Actor not found: "+name)
	}
	// The Town Guard is LIMITED: found, then refused by name.
	_, err := f.rules.GetConcentration(f.ctx, f.e, alice, ActorRef{Name: "town guard"})
	wantErr(t, err, world.ErrPermission, "User 'Alice' does not have permission to view actor 'Town Guard'")
	// The GM finds the Goblin.
	must(f.rules.GetConcentration(f.ctx, f.e, nil, ActorRef{Name: "goblin"}))(t)
	if got := f.value(aria, "system.currency.gp"); got != 85.0 {
		t.Fatalf("refused transfers moved coins: Aria has %v gp", got)
	}

	// The selection counts only actors the user sees: with the Goblin's
	// token selected, Alice has nothing selected.
	if _, err := f.e.Select(f.ctx, nil, world.SelectParams{UUIDs: []string{"Scene.tavernScene00001.Token.goblinToken00001"}}); err != nil {
		t.Fatal(err)
	}
	_, err = f.rules.ModifyExperience(f.ctx, f.e, alice, ActorRef{Selected: true}, 10)
	wantErr(t, err, world.ErrFailedPrecondition, "No token selected")
}

// TestChatMessagesReachOnlyTheActorsReaders: a roll's chat message is
// public only when every user may read the actor; otherwise it is
// whispered to those who may, so that no door shows it to the others.
func TestChatMessagesReachOnlyTheActorsReaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	alice, bob := f.user("Alice"), f.user("Bob")
	const gm = "gamemaster000001"
	whisperOf := func(user *world.User, actor string) []any {
		t.Helper()
		f.roll(10)
		must(f.rules.AbilityCheck(f.ctx, f.e, user, CheckParams{ActorUUID: actor, Ability: "str", ChatMessage: true}))(t)
		msgs := f.chats()
		slices.SortFunc(msgs, func(a, b world.Document) int { return int(a["timestamp"].(float64)) - int(b["timestamp"].(float64)) })
		for _, m := range msgs {
			if m["speaker"].(map[string]any)["actor"] == actor[len("Actor."):] {
				w, _ := m["whisper"].([]any)
				// Remove it, so the next call finds its own.
				if err := f.e.Delete(f.ctx, nil, "ChatMessage."+str(m["_id"])); err != nil {
					t.Fatal(err)
				}
				return w
			}
		}
		t.Fatalf("no chat message about %s", actor)
		return nil
	}
	// Aria: Bob is LIMITED and Tess sees nothing, so only her readers
	// (Alice, the GM) get it.
	if w := whisperOf(alice, aria); !slices.Equal(w, []any{"aliceUser0000001", gm}) {
		t.Fatalf("Aria's roll whispered to %v", w)
	}
	// Brom: Alice observes, Bob owns; Tess sees nothing.
	if w := whisperOf(bob, brom); !slices.Equal(w, []any{"aliceUser0000001", "bobUser000000001", gm}) {
		t.Fatalf("Brom's roll whispered to %v", w)
	}
	// The Goblin, rolled by the GM: the GM only.
	if w := whisperOf(nil, goblin); !slices.Equal(w, []any{gm}) {
		t.Fatalf("the Goblin's roll whispered to %v", w)
	}
	// Innkeeper Mara is OBSERVER to everyone: public.
	if w := whisperOf(nil, mara); len(w) != 0 {
		t.Fatalf("Mara's roll whispered to %v", w)
	}
	// Whispered messages are not Bob's to read.
	f.roll(10)
	must(f.rules.AbilityCheck(f.ctx, f.e, nil, CheckParams{ActorUUID: goblin, Ability: "str", ChatMessage: true}))(t)
	for _, m := range f.chats() {
		_, err := f.e.Get(f.ctx, bob, "ChatMessage."+str(m["_id"]))
		wantErr(t, err, world.ErrPermission, "does not have permission to view this entity")
	}
}
