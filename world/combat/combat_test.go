package combat_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/combat"
	"github.com/tabletop-relay/relay/world/demo"
)

// Demo world uuids.
const (
	ariaToken   = "Scene.tavernScene00001.Token.ariaToken0000001"
	bromToken   = "Scene.tavernScene00001.Token.bromToken0000001"
	goblinToken = "Scene.tavernScene00001.Token.goblinToken00001"
	ariaActor   = "Actor.ariaVale00000001"
	bromActor   = "Actor.bromIronfist0001"
	goblinActor = "Actor.goblin0000000001"
)

// fixture is the demo world with a recorder of committed changes.
type fixture struct {
	eng     *world.Engine
	mu      sync.Mutex
	changes []world.Change
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{}
	host, err := world.OpenHost(t.TempDir(), world.Options{OnCommit: func(cs []world.Change) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.changes = append(f.changes, cs...)
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	w, err := host.Create(context.Background(), "demo", seed)
	if err != nil {
		t.Fatal(err)
	}
	f.eng = w
	f.takeChanges()
	return f
}

// takeChanges returns the changes committed since the last call.
func (f *fixture) takeChanges() []world.Change {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.changes
	f.changes = nil
	return out
}

func (f *fixture) user(t *testing.T, name string) *world.User {
	t.Helper()
	u, err := f.eng.ResolveUser(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// dice returns the faces in order, then fails the test.
func dice(t *testing.T, faces ...int) combat.Dice {
	return func(n int) int {
		if n != 20 {
			t.Errorf("rolled a d%d, want d20", n)
		}
		if len(faces) == 0 {
			t.Fatal("rolled more dice than expected")
		}
		f := faces[0]
		faces = faces[1:]
		return f
	}
}

func names(e combat.Encounter) []string {
	var out []string
	for _, c := range e.Combatants {
		out = append(out, c.Name)
	}
	return out
}

func wantKind(t *testing.T, err, kind error, msg string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want kind %v", err, kind)
	}
	if msg != "" && err.Error() != msg {
		t.Fatalf("error %q, want %q", err.Error(), msg)
	}
}

// TestInitiativeTies: the tabletop's turn order: equal initiative goes to
// the name (the core Combat's sort; the fifth-edition system adds nothing
// unless the world turns its dexterity tiebreaker on, see
// TestDexTiebreakerSetting).
func TestInitiativeTies(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// Aria d20 10 + 2 (dex 14), Brom 11 + 1 (dex 12), Goblin 10 + 2 (dex 14):
	// all 12.
	m := combat.New(dice(t, 10, 11, 10))
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{Name: "Ties", TokenUUIDs: []string{ariaToken, bromToken, goblinToken}, RollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(e); !slices.Equal(got, []string{"Aria Vale", "Brom Ironfist", "Goblin"}) {
		t.Fatalf("order %v", got)
	}
	for _, c := range e.Combatants {
		if c.Initiative == nil || *c.Initiative != 12 {
			t.Fatalf("%s initiative %v, want 12", c.Name, c.Initiative)
		}
	}
	if e.Round != 1 || e.Turn != 0 || !e.Current || !e.Started || e.Name != "Ties" {
		t.Fatalf("encounter %+v", e)
	}
	if c := e.Combatants[0]; c.TokenUUID != ariaToken || c.ActorUUID != ariaActor || c.Img != "tokens/aria.svg" || c.Hidden || c.Defeated {
		t.Fatalf("combatant %+v", c)
	}
}

// TestInitiativeBonusFromActor: the bonus is the dexterity modifier plus a
// numeric init bonus; a non-numeric bonus adds nothing.
func TestInitiativeBonusFromActor(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.eng.Update(ctx, nil, bromActor, world.Document{"system.attributes.init.bonus": "3", "system.abilities.dex.value": 17.0}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Update(ctx, nil, ariaActor, world.Document{"system.attributes.init.bonus": "@prof"}); err != nil {
		t.Fatal(err)
	}
	m := combat.New(dice(t, 5, 5))
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{bromToken, ariaToken}, RollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	// Brom 5 + 3 (dex 17) + 3 = 11, Aria 5 + 2 = 7.
	if *e.Combatants[0].Initiative != 11 || *e.Combatants[1].Initiative != 7 || e.Name != "New Encounter" {
		t.Fatalf("encounter %+v", e)
	}
}

// TestRollNPCAndPlayers: start with the player-owned tokens and a goblin,
// roll for NPCs only; unrolled combatants come last, by dexterity.
func TestRollNPCAndPlayers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(dice(t, 3))
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{goblinToken}, WithPlayers: true, RollNPC: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(e); !slices.Equal(got, []string{"Goblin", "Aria Vale", "Brom Ironfist"}) {
		t.Fatalf("order %v", got)
	}
	if *e.Combatants[0].Initiative != 5 || e.Combatants[1].Initiative != nil || e.Combatants[2].Initiative != nil {
		t.Fatalf("initiatives %+v", e.Combatants)
	}
	// Players only: the goblin has no player owner.
	e2, err := m.Start(ctx, f.eng, nil, combat.StartParams{WithPlayers: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(e2); !slices.Equal(got, []string{"Aria Vale", "Brom Ironfist"}) {
		t.Fatalf("players %v", got)
	}
	// The newer encounter is the active one now.
	list, err := m.List(ctx, f.eng, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != e.ID || list[0].Current || !list[1].Current {
		t.Fatalf("list %+v", list)
	}
}

func TestStartWithSelected(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.eng.Select(ctx, nil, world.SelectParams{UUIDs: []string{goblinToken, ariaToken}}); err != nil {
		t.Fatal(err)
	}
	e, err := combat.New(nil).Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{ariaToken}, WithSelected: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Combatants) != 2 {
		t.Fatalf("combatants %v (a token is added once)", names(e))
	}
}

func TestStartRefusesBadTokensAndPlayers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(nil)
	_, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{"Scene.tavernScene00001.Token.nope000000000001"}})
	wantKind(t, err, world.ErrNotFound, "Entity not found: Scene.tavernScene00001.Token.nope000000000001")
	_, err = m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{"Item.potionHealing001"}})
	wantKind(t, err, world.ErrInvalid, "Entity must be a Token or Actor")
	_, err = m.Start(ctx, f.eng, f.user(t, "Alice"), combat.StartParams{})
	wantKind(t, err, world.ErrPermission, "User 'Alice' must be a GM to start encounters")
	list, _ := m.List(ctx, f.eng, nil)
	if len(list) != 0 {
		t.Fatalf("a failed start left %d encounters", len(list))
	}
}

// TestTurnsSkipDefeatedAndWrap walks the turns forwards and back.
func TestTurnsSkipDefeatedAndWrap(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(dice(t, 18, 5, 10)) // Aria 20, Brom 6, Goblin 12
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{ariaToken, bromToken, goblinToken}, RollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(e); !slices.Equal(got, []string{"Aria Vale", "Goblin", "Brom Ironfist"}) {
		t.Fatalf("order %v", got)
	}
	if _, err := f.eng.Kill(ctx, nil, goblinToken); err != nil {
		t.Fatal(err)
	}
	f.takeChanges()
	step := func(a combat.Action, round, turn int, actor string) {
		t.Helper()
		pos, err := m.Navigate(ctx, f.eng, nil, "", a)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		if pos.Round != round || pos.Turn != turn || pos.ActorUUID != actor || pos.Action != a || pos.EncounterID != e.ID ||
			pos.Encounter.Round != round || pos.Encounter.Turn != turn {
			t.Fatalf("%s: %+v, want round %d turn %d actor %s", a, pos, round, turn, actor)
		}
	}
	step(combat.NextTurn, 1, 2, bromActor) // the defeated goblin is skipped
	step(combat.NextTurn, 2, 0, ariaActor) // past the last: next round
	step(combat.PreviousTurn, 1, 2, bromActor)
	step(combat.PreviousTurn, 1, 0, ariaActor)
	_, err = m.Navigate(ctx, f.eng, nil, "", combat.PreviousTurn)
	wantKind(t, err, world.ErrFailedPrecondition, "Encounter 'New Encounter' is at its first turn of round 1: there is no previous turn")
	_, err = m.Navigate(ctx, f.eng, nil, e.ID, combat.PreviousRound)
	wantKind(t, err, world.ErrFailedPrecondition, "")
	step(combat.NextRound, 2, 0, ariaActor)
	step(combat.NextTurn, 2, 2, bromActor)
	step(combat.PreviousRound, 1, 0, ariaActor)

	// Every move was one update of the combat with its round and turn.
	for _, c := range f.takeChanges() {
		if c.Op != world.ChangeUpdate || c.DocumentName != "Combat" {
			t.Fatalf("unexpected change %v %s", c.Op, c.UUID)
		}
	}

	pos, err := m.Navigate(ctx, f.eng, nil, "", combat.NextTurn)
	if err != nil || pos.TokenUUID != bromToken {
		t.Fatalf("next turn: %+v %v", pos, err)
	}
	_, err = m.Navigate(ctx, f.eng, f.user(t, "Bob"), "", combat.NextTurn)
	wantKind(t, err, world.ErrPermission, "User 'Bob' must be a GM to advance encounter turns")
}

func TestAllDefeatedCannotTakeTurns(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(nil)
	if _, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{goblinToken}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Kill(ctx, nil, goblinToken); err != nil {
		t.Fatal(err)
	}
	_, err := m.Navigate(ctx, f.eng, nil, "", combat.NextTurn)
	wantKind(t, err, world.ErrFailedPrecondition, "Encounter 'New Encounter' has no combatant able to act")
}

func TestUnknownAndMissingEncounters(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(nil)
	_, err := m.Navigate(ctx, f.eng, nil, "", combat.NextTurn)
	wantKind(t, err, world.ErrNotFound, "No active encounter")
	_, err = m.Navigate(ctx, f.eng, nil, "nope", combat.NextRound)
	wantKind(t, err, world.ErrNotFound, "Encounter with ID nope not found")
	_, err = m.End(ctx, f.eng, nil, "")
	wantKind(t, err, world.ErrNotFound, "No active encounter")
	_, err = m.Add(ctx, f.eng, nil, combat.MembersParams{EncounterID: "abcdefghijklmnop", UUIDs: []string{ariaToken}})
	wantKind(t, err, world.ErrNotFound, "Encounter with ID abcdefghijklmnop not found")

	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.End(ctx, f.eng, f.user(t, "alice"), e.ID)
	wantKind(t, err, world.ErrPermission, "User 'Alice' must be a GM to end encounters")
	ended, err := m.End(ctx, f.eng, nil, "Combat."+e.ID)
	if err != nil || ended != e.ID {
		t.Fatalf("end: %q %v", ended, err)
	}
	changes := f.takeChanges()
	if last := changes[len(changes)-1]; last.Op != world.ChangeDelete || last.UUID != "Combat."+e.ID {
		t.Fatalf("last change %+v", last)
	}
}

// TestAddAndRemove: permissions per uuid, duplicates, the current
// combatant keeps its turn, and the changes are combatant creations and
// deletions.
func TestAddAndRemove(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(dice(t, 10, 15)) // Brom 11; then Goblin 17 when added
	if _, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{bromToken}, RollAll: true}); err != nil {
		t.Fatal(err)
	}
	f.takeChanges()
	alice := f.user(t, "Alice")
	res, err := m.Add(ctx, f.eng, alice, combat.MembersParams{UUIDs: []string{ariaActor, goblinToken, bromToken, "Actor.nobody0000000001"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Done, []string{ariaActor}) || len(res.Failed) != 3 {
		t.Fatalf("add as Alice: %+v", res)
	}
	for i, want := range []string{
		"User 'Alice' does not have permission to add to encounter 'Actor.goblin0000000001'",
		"Already in the encounter",
		"Entity not found: Actor.nobody0000000001",
	} {
		if res.Failed[i].Reason != want {
			t.Fatalf("failed[%d] = %+v, want %q", i, res.Failed[i], want)
		}
	}
	changes := f.takeChanges()
	if len(changes) != 2 || changes[1].Op != world.ChangeCreate || changes[1].DocumentName != "Combatant" {
		t.Fatalf("changes %+v", changes)
	}
	// A GM adds the goblin with an initiative roll; only what is added
	// rolls, so Aria (not rolled) stays last.
	res, err = m.Add(ctx, f.eng, nil, combat.MembersParams{UUIDs: []string{goblinToken}, RollInitiative: true})
	if err != nil || !slices.Equal(res.Done, []string{goblinToken}) {
		t.Fatalf("add goblin: %+v %v", res, err)
	}
	list, _ := m.List(ctx, f.eng, nil)
	e := list[0]
	if got := names(e); !slices.Equal(got, []string{"Goblin", "Brom Ironfist", "Aria Vale"}) {
		t.Fatalf("order %v", got)
	}
	if e.Turn != 1 {
		t.Fatalf("turn %d, want 1: Brom keeps the turn", e.Turn)
	}
	// Removing the current combatant passes the turn to the next one.
	res, err = m.Remove(ctx, f.eng, f.user(t, "Bob"), combat.MembersParams{UUIDs: []string{bromActor, goblinActor, ariaToken + "x"}})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Done, []string{bromActor}) || len(res.Failed) != 2 ||
		res.Failed[0].Reason != "User 'Bob' does not have permission to remove from encounter 'Actor.goblin0000000001'" ||
		res.Failed[1].Reason != "No combatant found for this entity" {
		t.Fatalf("remove as Bob: %+v", res)
	}
	list, _ = m.List(ctx, f.eng, nil)
	if got := names(list[0]); !slices.Equal(got, []string{"Goblin", "Aria Vale"}) || list[0].Turn != 1 {
		t.Fatalf("after remove %v turn %d", got, list[0].Turn)
	}
	// A combatant uuid works too.
	goblinCombatant := "Combat." + list[0].ID + ".Combatant." + list[0].Combatants[0].ID
	res, err = m.Remove(ctx, f.eng, nil, combat.MembersParams{UUIDs: []string{goblinCombatant}})
	if err != nil || len(res.Done) != 1 {
		t.Fatalf("remove combatant: %+v %v", res, err)
	}
}

// TestHiddenCombatants: a non-GM sees a hidden combatant only when owning
// its actor.
func TestHiddenCombatants(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, token := range []string{ariaToken, goblinToken} {
		if _, err := f.eng.Update(ctx, nil, token, world.Document{"hidden": true}); err != nil {
			t.Fatal(err)
		}
	}
	m := combat.New(nil)
	if _, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{ariaToken, bromToken, goblinToken}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		user *world.User
		want int
	}{{nil, 3}, {f.user(t, "Alice"), 2}, {f.user(t, "Bob"), 1}, {f.user(t, "Gamemaster"), 3}} {
		list, err := m.List(ctx, f.eng, tt.user)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(list[0].Combatants); got != tt.want {
			t.Errorf("user %v sees %d combatants %v, want %d", tt.user, got, names(list[0]), tt.want)
		}
	}
}

// TestDeletingRemovesCombatants: deleting a token, an actor or a scene
// through the world removes their combatants.
func TestDeletingRemovesCombatants(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(nil)
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{TokenUUIDs: []string{ariaToken, bromToken, goblinToken}})
	if err != nil {
		t.Fatal(err)
	}
	f.takeChanges()
	if err := f.eng.Delete(ctx, nil, goblinToken); err != nil {
		t.Fatal(err)
	}
	var removed []string
	for _, c := range f.takeChanges() {
		if c.Op == world.ChangeDelete && c.DocumentName == "Combatant" {
			removed = append(removed, c.UUID)
		}
	}
	if len(removed) != 1 || !strings.HasPrefix(removed[0], "Combat."+e.ID+".Combatant.") {
		t.Fatalf("removed %v", removed)
	}
	if err := f.eng.Delete(ctx, nil, ariaActor); err != nil {
		t.Fatal(err)
	}
	list, _ := m.List(ctx, f.eng, nil)
	if got := names(list[0]); !slices.Equal(got, []string{"Brom Ironfist"}) {
		t.Fatalf("after deleting the actor: %v", got)
	}
	if err := f.eng.Delete(ctx, nil, "Scene.tavernScene00001"); err != nil {
		t.Fatal(err)
	}
	list, _ = m.List(ctx, f.eng, nil)
	if len(list[0].Combatants) != 0 {
		t.Fatalf("after deleting the scene: %v", names(list[0]))
	}
	// Deleting something else leaves combats alone.
	if err := f.eng.Delete(ctx, nil, "Item.potionHealing001"); err != nil {
		t.Fatal(err)
	}
}

// TestDexTiebreakerSetting: with the fifth-edition world setting
// `dnd5e.initiativeDexTiebreaker` on, each initiative rolled gains a
// hundredth of the dexterity score, as in the system, so the higher
// dexterity goes first among equal rolls.
func TestDexTiebreakerSetting(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.eng.SetSetting(ctx, "dnd5e.initiativeDexTiebreaker", true); err != nil {
		t.Fatal(err)
	}
	m := combat.New(dice(t, 10, 11, 10))
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{Name: "Ties", TokenUUIDs: []string{ariaToken, bromToken, goblinToken}, RollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := names(e); !slices.Equal(got, []string{"Aria Vale", "Goblin", "Brom Ironfist"}) {
		t.Fatalf("order %v", got)
	}
	want := map[string]float64{"Aria Vale": 12.14, "Goblin": 12.14, "Brom Ironfist": 12.12}
	for _, c := range e.Combatants {
		if c.Initiative == nil || *c.Initiative != want[c.Name] {
			t.Fatalf("%s initiative %v, want %v", c.Name, c.Initiative, want[c.Name])
		}
	}
	if f.eng.Setting("dnd5e.initiativeDexTiebreaker") != true {
		t.Fatal("the setting is not kept")
	}
}

// TestNavigationProperties walks random turn and round moves (a property
// test, both ways) and checks the tabletop's arithmetic against a model
// kept apart from the code: a turn forward past the last combatant able
// to act starts the next round at the first; a turn back before the first
// goes to the last of the previous round; a round forward or back goes to
// the first combatant able to act of that round; going back is refused
// only from round 1 (its first turn, for turns), from any turn of any
// round above 1 it succeeds; every turn names a combatant able to act.
// RELAY_COMBAT_STEPS makes the walk longer.
func TestNavigationProperties(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	m := combat.New(dice(t, 15, 12, 8))
	e, err := m.Start(ctx, f.eng, nil, combat.StartParams{Name: "Walk", TokenUUIDs: []string{ariaToken, bromToken, goblinToken}, RollAll: true})
	if err != nil {
		t.Fatal(err)
	}
	n := len(e.Combatants)
	defeated := make([]bool, n)
	first := func() int { return slices.Index(defeated, false) }
	last := func() int {
		for i := n - 1; i >= 0; i-- {
			if !defeated[i] {
				return i
			}
		}
		return -1
	}
	round, turn := e.Round, e.Turn
	steps := 400
	if s := os.Getenv("RELAY_COMBAT_STEPS"); s != "" {
		if steps, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(7, 11))
	actions := []combat.Action{combat.NextTurn, combat.PreviousTurn, combat.NextRound, combat.PreviousRound}
	for i := range steps {
		// Now and then a combatant other than the current one falls or
		// gets back up (never all of them).
		if r.IntN(10) == 0 {
			c := r.IntN(n)
			if c != turn {
				defeated[c] = !defeated[c]
				if first() < 0 {
					defeated[c] = false
				}
				if _, err := f.eng.Update(ctx, nil, "Combat."+e.ID+".Combatant."+e.Combatants[c].ID, world.Document{"defeated": defeated[c]}); err != nil {
					t.Fatal(err)
				}
			}
		}
		action := actions[r.IntN(len(actions))]
		wantRound, wantTurn, refused := round, turn, false
		switch action {
		case combat.NextTurn:
			wantTurn = -1
			for j := turn + 1; j < n; j++ {
				if !defeated[j] {
					wantTurn = j
					break
				}
			}
			if wantTurn < 0 {
				wantRound, wantTurn = round+1, first()
			}
		case combat.PreviousTurn:
			wantTurn = -1
			for j := turn - 1; j >= 0; j-- {
				if !defeated[j] {
					wantTurn = j
					break
				}
			}
			switch {
			case wantTurn >= 0:
			case round <= 1:
				refused = true
			default:
				wantRound, wantTurn = round-1, last()
			}
		case combat.NextRound:
			wantRound, wantTurn = round+1, first()
		case combat.PreviousRound:
			if round <= 1 {
				refused = true
			} else {
				wantRound, wantTurn = round-1, first()
			}
		}
		pos, err := m.Navigate(ctx, f.eng, nil, e.ID, action)
		if refused {
			if !errors.Is(err, world.ErrFailedPrecondition) {
				t.Fatalf("step %d: %s from round %d turn %d: %v, want a refusal", i, action, round, turn, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("step %d: %s from round %d turn %d (defeated %v): %v", i, action, round, turn, defeated, err)
		}
		if pos.Round != wantRound || pos.Turn != wantTurn || pos.Encounter.Round != wantRound || pos.Encounter.Turn != wantTurn {
			t.Fatalf("step %d: %s from round %d turn %d (defeated %v): at %d/%d, want %d/%d", i, action, round, turn, defeated, pos.Round, pos.Turn, wantRound, wantTurn)
		}
		if defeated[pos.Turn] || pos.ActorUUID != e.Combatants[pos.Turn].ActorUUID {
			t.Fatalf("step %d: turn %d names %s (defeated %v)", i, pos.Turn, pos.ActorUUID, defeated)
		}
		round, turn = pos.Round, pos.Turn
	}
}
