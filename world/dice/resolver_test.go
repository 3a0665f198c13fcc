package dice

import (
	"errors"
	"slices"
	"testing"
)

// TestResolverRefusesReferences: a reference the resolver refuses fails
// the evaluation with the resolver's own error, whether it stands in the
// formula or in a formula a reference led to; references it accepts read
// its values.
func TestResolverRefusesReferences(t *testing.T) {
	t.Parallel()
	refused := errors.New("not yours to read")
	var asked []string
	resolve := func(path string) (any, error) {
		asked = append(asked, path)
		switch path {
		case "secret.hp":
			return nil, refused
		case "mine":
			return 4.0, nil
		case "indirect":
			return "1 + @secret.hp", nil
		}
		return nil, nil
	}
	r, err := EvaluateWith("1d20 + @mine + @missing", resolve, NewSequence(10))
	if err != nil || r.Total != 14 || r.Formula != "1d20 + 4 + 0" {
		t.Fatalf("accepted references: %+v %v", r, err)
	}
	for _, formula := range []string{"1d20 + @secret.hp", "@mine + @indirect", "floor(@secret.hp / 2)"} {
		asked = nil
		if _, err := EvaluateWith(formula, resolve, NewSequence(10)); !errors.Is(err, refused) {
			t.Errorf("%s: error %v, want the resolver's refusal", formula, err)
		}
		if !slices.Contains(asked, "secret.hp") {
			t.Errorf("%s: the resolver was not asked for secret.hp: %v", formula, asked)
		}
	}
	// Data is the resolver of a roll data tree: nothing refused.
	if r, err := EvaluateWith("@abilities.dex.mod + @nothing", Data(rollData), NewSequence()); err != nil || r.Total != 2 {
		t.Fatalf("Data: %+v %v", r, err)
	}
}
