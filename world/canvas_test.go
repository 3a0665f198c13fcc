package world

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestSelect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	_, err := tw.Select(ctx, alice, SelectParams{All: true})
	wantError(t, err, ErrPermission, "User 'Alice' must be a GM to select tokens")
	_, err = tw.Selected(ctx, alice)
	wantError(t, err, ErrPermission, "User 'Alice' must be a GM to get selected tokens")
	_, err = tw.Select(ctx, nil, SelectParams{})
	wantError(t, err, ErrInvalid, "One of 'uuids', 'name', 'data' or 'all' is required")
	_, err = tw.Select(ctx, nil, SelectParams{Name: "Dragon"})
	wantError(t, err, ErrNotFound, "No matching entities found")

	steps := []struct {
		p        SelectParams
		matched  []string
		selected []SelectedToken
	}{
		{
			SelectParams{Name: "goblin"},
			[]string{tokenGoblin},
			[]SelectedToken{{tokenGoblin, actorNone}},
		},
		{
			SelectParams{Match: Document{"actor.name": "Hero", "x": 100}},
			[]string{tokenOwner},
			[]SelectedToken{{tokenGoblin, actorNone}, {tokenOwner, actorOwner}},
		},
		{
			SelectParams{UUIDs: []string{tokenOwner}, Overwrite: true},
			[]string{tokenOwner},
			[]SelectedToken{{tokenOwner, actorOwner}},
		},
		{
			SelectParams{All: true},
			[]string{tokenOwner, tokenGoblin},
			[]SelectedToken{{tokenOwner, actorOwner}, {tokenGoblin, actorNone}},
		},
	}
	for _, s := range steps {
		matched, err := tw.Select(ctx, nil, s.p)
		if err != nil || !cmp.Equal(matched, s.matched) {
			t.Fatalf("Select(%+v) = %v, %v; want %v", s.p, matched, err, s.matched)
		}
		selected, err := tw.Selected(ctx, nil)
		if err != nil || !cmp.Equal(selected, s.selected) {
			t.Fatalf("Selected after %+v = %v, %v; want %v", s.p, selected, err, s.selected)
		}
	}

	// Deleted tokens drop out of the selection; no active scene, no canvas.
	if err := tw.Delete(ctx, nil, tokenGoblin); err != nil {
		t.Fatal(err)
	}
	if selected, _ := tw.Selected(ctx, nil); !cmp.Equal(selected, []SelectedToken{{tokenOwner, actorOwner}}) {
		t.Errorf("Selected after a deletion = %v", selected)
	}
	if _, err := tw.Update(ctx, nil, sceneUUID, Document{"active": false}); err != nil {
		t.Fatal(err)
	}
	_, err = tw.Selected(ctx, nil)
	wantError(t, err, ErrFailedPrecondition, "No active scene found")
	_, err = tw.Select(ctx, nil, SelectParams{All: true})
	wantError(t, err, ErrFailedPrecondition, "No active scene found")
}
