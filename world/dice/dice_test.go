package dice

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

var rollData = map[string]any{
	"abilities": map[string]any{"dex": map[string]any{"mod": 2.0}, "str": map[string]any{"mod": -1.0}},
	"prof":      3.0,
	"bonus":     "+1",
	"sneak":     "2d6",
	"empty":     "",
	"flag":      true,
	"object":    map[string]any{"a": 1.0},
	"bad":       "2 +",
	"big":       "1000000d6",
	"huge":      1e300,
	"self":      "@self",
}

// init adds a chain of references that each name the next twice: @twice0
// is within MaxDepth but would take 2^14 evaluations of @twice14 without
// MaxSteps (and each link more would double that).
func init() {
	for i := range 14 {
		rollData[fmt.Sprintf("twice%d", i)] = fmt.Sprintf("@twice%d + @twice%d", i+1, i+1)
	}
	rollData["twice14"] = "1"
}

func TestEvaluate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		formula string
		rolls   []int
		total   float64
		shown   string // formula as evaluated
		result  string
	}{
		{"1d20 + 5", []int{14}, 19, "1d20 + 5", "14 + 5"},
		{"d20", []int{7}, 7, "1d20", "7"},
		{"1d20 + @abilities.dex.mod + @prof", []int{10}, 15, "1d20 + 2 + 3", "10 + 2 + 3"},
		{"1d20 + @abilities.str.mod", []int{10}, 9, "1d20 - 1", "10 - 1"},
		{"1d20 - @abilities.str.mod", []int{10}, 11, "1d20 + 1", "10 + 1"},
		{"2d20kh", []int{4, 17}, 17, "2d20kh", "17"},
		{"2d20kl + 1", []int{4, 17}, 5, "2d20kl + 1", "4 + 1"},
		{"4d6dl1", []int{3, 1, 6, 4}, 13, "4d6dl1", "13"},
		{"4d6kh3", []int{3, 1, 6, 4}, 13, "4d6kh3", "13"},
		{"4d6dh2", []int{3, 1, 6, 4}, 4, "4d6dh2", "4"},
		{"2d6k", []int{2, 5}, 5, "2d6k", "5"},
		{"(1d8 + 3) * 2", []int{5}, 16, "(1d8 + 3) * 2", "(5 + 3) * 2"},
		{"floor(7 / 2)", nil, 3, "floor(7 / 2)", "3"},
		{"ceil(7 / 2)", nil, 4, "ceil(7 / 2)", "4"},
		{"round(2.5)", nil, 3, "round(2.5)", "3"},
		{"-2 + 1d4", []int{4}, 2, "-2 + 1d4", "-2 + 4"},
		{"+5", nil, 5, "5", "5"},
		{"1d20 + @bonus", []int{3}, 4, "1d20 + 1", "3 + 1"},
		{"1d20 + @sneak", []int{3, 2, 6}, 11, "1d20 + 2d6", "3 + 8"},
		{"2 * @sneak", []int{2, 6}, 16, "2 * 2d6", "2 * 8"},
		{"1d20 + @missing + @empty", []int{9}, 9, "1d20 + 0 + 0", "9 + 0 + 0"},
		{"@flag + 1", nil, 2, "1 + 1", "1 + 1"},
		{"1d%", []int{55}, 55, "1d100", "55"},
		{"10 / 4", nil, 2.5, "10 / 4", "10 / 4"},
		{"-(1d4 + 1)", []int{2}, -3, "-(1d4 + 1)", "-(2 + 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.formula, func(t *testing.T) {
			t.Parallel()
			got, err := Evaluate(tt.formula, rollData, NewSequence(tt.rolls...))
			if err != nil {
				t.Fatal(err)
			}
			if got.Total != tt.total || got.Formula != tt.shown || got.Result != tt.result {
				t.Fatalf("got total %v formula %q result %q; want %v %q %q", got.Total, got.Formula, got.Result, tt.total, tt.shown, tt.result)
			}
		})
	}
}

func TestDiceDetails(t *testing.T) {
	t.Parallel()
	got, err := Evaluate("2d20kh + 1d4", nil, NewSequence(4, 17, 3))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Dice) != 2 {
		t.Fatalf("dice %+v", got.Dice)
	}
	d20 := got.Dice[0]
	if d20.Faces != 20 || d20.Number != 2 || d20.Total != 17 || d20.Modifiers[0] != "kh" ||
		d20.Results[0] != (DieResult{Result: 4}) || d20.Results[1] != (DieResult{Result: 17, Active: true}) {
		t.Fatalf("d20 term %+v", d20)
	}
	if n, ok := got.Natural(20); !ok || n != 17 {
		t.Fatalf("natural = %d %v", n, ok)
	}
	if _, ok := got.Natural(12); ok {
		t.Fatal("a d12 natural from a roll without one")
	}
	// Equal results: keep-highest keeps the first die, keep-lowest too.
	got, _ = Evaluate("2d20kl", nil, NewSequence(9, 9))
	if !got.Dice[0].Results[0].Active || got.Dice[0].Results[1].Active {
		t.Fatalf("ties: %+v", got.Dice[0].Results)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		adv, dis bool
		want     string
	}{{false, false, "1d20"}, {true, false, "2d20kh"}, {false, true, "2d20kl"}, {true, true, "1d20"}} {
		if got := Check(tt.adv, tt.dis); got != tt.want {
			t.Errorf("Check(%v, %v) = %s, want %s", tt.adv, tt.dis, got, tt.want)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		formula  string
		pos      int
		text     string
		tooLarge bool
	}{
		{"", 0, "empty", false},
		{"1d20 +", 7, "unexpected end", false},
		{"1d20 + x", 8, "unknown name 'x'", false},
		{"1d20 $ 3", 6, "unexpected '$'", false},
		{"(1d6 + 2", 1, "unclosed '('", false},
		{"1d6)", 4, "unexpected ')'", false},
		{"2d0", 3, "at least one face", false},
		{"1d6q", 4, "unknown dice modifier 'q'", false},
		{"1d20min", 5, "'min' must be followed by a number", false},
		{"1d6r<", 6, "the comparison of 'r' needs a number", false},
		{"1d6x=>3", 5, "'=>' is not a comparison", false},
		{"max()", 5, "unexpected ')'", false},
		{"floor(1, 2)", 1, "floor takes exactly one argument", false},
		{"1d4[fire", 4, "unclosed '[' of a flavour label", false},
		{"1d1x", 1, "rolls more than 1000 dice, rerolls and explosions included", true},
		{"1d1rr", 1, "rolls more than 1000 dice, rerolls and explosions included", true},
		{"floor 2", 7, "must be followed by '('", false},
		{"@", 1, "roll data path", false},
		{"4 / (2 - 2)", 3, "division by zero", false},
		{"1d20 + @object", 8, "@object is not a number", false},
		{"1d20 + @bad", 8, "not a formula", false},
		{"10000d10000", 1, "at most 1000 dice", true},
		{"1d100000", 3, "faces", true},
		{"10000d6", 1, "at most 1000 dice", true},
		{"600d6 + 600d6", 0, "more than 1000", true},
		{strings.Repeat("(", 40) + "1" + strings.Repeat(")", 40), 0, "nested deeper", true},
		{strings.Repeat("1+", 600) + "1", 0, "longer than 1000 characters", true},
		// Absurd counts, faces and numbers are refused naming the limit,
		// never rolled in part or answered with a made-up total.
		{"1000000000d6", 1, "at most 1000 dice may be rolled", true},
		{"99999999999999999999999999999999999999d6", 1, "at most 1000 dice may be rolled", true},
		{"1d1000000000000", 3, "dice may have at most 10000 faces", true},
		{"1d99999999999999999999999", 3, "dice may have at most 10000 faces", true},
		{"4d6kh99999999999999999999", 4, "a keep or drop count may be at most 1000", true},
		{"99999999999999999", 1, "numbers may be at most 9007199254740991", true},
		{strings.Repeat("9", 400), 1, "numbers may be at most 9007199254740991", true},
		{"9007199254740991 + 1", 18, "beyond ±9007199254740991", true},
		{"1d20 + @huge", 8, "beyond ±9007199254740991", true},
		{"1d20 + @big", 8, "@big holds '1000000d6': at most 1000 dice may be rolled", true},
		{"@self", 1, "roll data references nest deeper than 32 levels", true},
		{"@twice0", 0, "takes more than 10000 steps", true},
		{"1d20 + @sneak + 999d6", 0, "more than 1000 dice", true},
		{strings.Repeat("-", 40) + "1", 0, "nested deeper than 32 levels", true},
	}
	for _, tt := range tests {
		name := tt.formula
		if len(name) > 20 {
			name = name[:20]
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := Evaluate(tt.formula, rollData, NewSequence(1))
			var de *Error
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *dice.Error", err)
			}
			if !strings.Contains(de.Error(), tt.text) || de.TooLarge != tt.tooLarge {
				t.Fatalf("error %q (too large %v), want it to mention %q (too large %v)", de.Error(), de.TooLarge, tt.text, tt.tooLarge)
			}
			if tt.pos != 0 && de.Pos != tt.pos {
				t.Fatalf("error %q at position %d, want %d", de.Error(), de.Pos, tt.pos)
			}
		})
	}
}

// TestMultipliedDice: a product of dice terms is refused once it can leave
// MaxValue, whatever the dice show, with the limit named.
func TestMultipliedDice(t *testing.T) {
	t.Parallel()
	formula := strings.TrimSuffix(strings.Repeat("100d100*", 5), "*")
	_, err := Evaluate(formula, nil, NewSequence(100))
	var de *Error
	if !errors.As(err, &de) || !de.TooLarge || !strings.Contains(de.Msg, "beyond ±9007199254740991") {
		t.Fatalf("%s with every die at 100: %v", formula, err)
	}
	// Ten such terms are over the dice limit before anything is rolled.
	_, err = Parse(strings.TrimSuffix(strings.Repeat("100d100*", 11), "*"))
	if !errors.As(err, &de) || !de.TooLarge || !strings.Contains(de.Msg, "rolls 1100 dice, more than 1000") {
		t.Fatalf("eleven terms: %v", err)
	}
}

func TestSources(t *testing.T) {
	t.Parallel()
	a, b := NewSeeded(42), NewSeeded(42)
	for range 100 {
		if x, y := a.Roll(20), b.Roll(20); x != y || x < 1 || x > 20 {
			t.Fatalf("seeded sources differ or out of range: %d %d", x, y)
		}
	}
	r := NewRandom()
	seen := map[int]bool{}
	for range 2000 {
		v := r.Roll(6)
		if v < 1 || v > 6 {
			t.Fatalf("d6 rolled %d", v)
		}
		seen[v] = true
	}
	if len(seen) != 6 {
		t.Fatalf("2000 d6 rolls showed only %v", seen)
	}
	s := NewSequence(25, 0)
	if s.Roll(20) != 5 || s.Roll(20) != 1 || s.Roll(20) != 5 || s.Used() != 3 {
		t.Fatal("sequence does not wrap as documented")
	}
}

// genFormula builds a random valid formula and its smallest and largest
// possible totals. Division and functions are left out of the bounds'
// generator to keep them exact; they are covered by the never-panics check.
func genFormula(r *rand.Rand, depth int) (text string, lo, hi float64) {
	switch k := r.IntN(5); {
	case depth > 3 || k == 0:
		n := float64(r.IntN(21) - 10)
		return formatNumber(n), n, n
	case k == 1:
		count, faces := r.IntN(4)+1, []int{4, 6, 8, 10, 12, 20, 100}[r.IntN(7)]
		mod, kept := "", count
		if count > 1 && r.IntN(2) == 0 {
			kept = r.IntN(count) + 1
			mod = fmt.Sprintf("kh%d", kept)
			if r.IntN(2) == 0 {
				mod = fmt.Sprintf("dl%d", count-kept)
			}
		}
		return fmt.Sprintf("%dd%d%s", count, faces, mod), float64(kept), float64(kept * faces)
	case k == 2:
		t, l, h := genFormula(r, depth+1)
		return "(" + t + ")", l, h
	case k == 3:
		t, l, h := genFormula(r, depth+1)
		return "-" + "(" + t + ")", -h, -l
	default:
		lt, ll, lh := genFormula(r, depth+1)
		rt, rl, rh := genFormula(r, depth+1)
		switch r.IntN(3) {
		case 0:
			return "(" + lt + ") + (" + rt + ")", ll + rl, lh + rh
		case 1:
			return "(" + lt + ") - (" + rt + ")", ll - rh, lh - rl
		default:
			c := []float64{ll * rl, ll * rh, lh * rl, lh * rh}
			return "(" + lt + ") * (" + rt + ")", min(c[0], c[1], c[2], c[3]), max(c[0], c[1], c[2], c[3])
		}
	}
}

// TestPropertyTotalsInBounds: random valid formulas evaluate, their totals
// lie within the bounds the dice allow, every die is within its faces, and
// re-parsing the evaluated formula gives the same total with the same dice.
func TestPropertyTotalsInBounds(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		text, lo, hi := genFormula(r, 0)
		seed := r.Uint64()
		got, err := Evaluate(text, nil, NewSeeded(seed))
		if err != nil {
			t.Fatalf("%d: %q: %v", i, text, err)
		}
		if got.Total < lo || got.Total > hi {
			t.Fatalf("%q = %v, outside [%v, %v]", text, got.Total, lo, hi)
		}
		for _, d := range got.Dice {
			for _, res := range d.Results {
				if res.Result < 1 || res.Result > d.Faces {
					t.Fatalf("%q: die %d of d%d", text, res.Result, d.Faces)
				}
			}
		}
		again, err := Evaluate(got.Formula, nil, NewSeeded(seed))
		if err != nil || again.Total != got.Total {
			t.Fatalf("%q evaluated as %q: %v, total %v vs %v", text, got.Formula, err, again.Total, got.Total)
		}
	}
}

// TestPropertyNeverPanics feeds random byte soup made of formula characters.
func TestPropertyNeverPanics(t *testing.T) {
	t.Parallel()
	const alphabet = "0123456789dDkhlr%+-*/().@ abcfloorceilroundprof"
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		b := make([]byte, r.IntN(30))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		checkNoPanic(t, string(b))
	}
}

// checkNoPanic evaluates a formula and checks the outcome is sane: either
// an *Error (naming the limit, a number, when it is one of the size
// limits) or a total within MaxValue from at most MaxDice dice of at most
// MaxFaces faces.
func checkNoPanic(t *testing.T, formula string) {
	t.Helper()
	got, err := Evaluate(formula, rollData, NewSeeded(7))
	if err != nil {
		var de *Error
		if !errors.As(err, &de) {
			t.Fatalf("%q: error of type %T", formula, err)
		}
		if de.TooLarge && !strings.ContainsAny(de.Msg, "0123456789") {
			t.Fatalf("%q: size error %q names no limit", formula, de.Msg)
		}
		return
	}
	if math.IsNaN(got.Total) || math.IsInf(got.Total, 0) || math.Abs(got.Total) > MaxValue {
		t.Fatalf("%q: total %v", formula, got.Total)
	}
	rolled := 0
	for _, d := range got.Dice {
		rolled += len(d.Results)
		if d.Faces > MaxFaces {
			t.Fatalf("%q: a d%d", formula, d.Faces)
		}
	}
	if rolled > MaxDice {
		t.Fatalf("%q: rolled %d dice", formula, rolled)
	}
}

// FuzzParse checks that no input makes the parser or evaluator panic or
// return anything but a *dice.Error or a finite total. `go test` runs the
// seeds only; `go test -fuzz FuzzParse ./world/dice/` explores.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		"1d20 + 5", "2d20kh", "2d20kl - 1", "4d6dl1", "d%", "floor((1d8 + @abilities.dex.mod) / 2)",
		"ceil(3/2)*round(2.5)", "-(-(-1))", "@bonus + @sneak", "1000d1", "1d10000", "((((1))))",
		"1d6x", "1d", "d", "@", "@.", "kh", "3d6kh2kl1", "1.5d6", "0d6", "9999999999999999999d6",
		"1e5", "..", "abs(-3)", "1d20 + @prof", "2d20kh1 + 1d4 + 3",
		"2d6r1", "4d6rr<3", "3d6x", "5d10xo>=9", "1d20min10", "2d6max3", "6d10cs>=7", "max(0, 1d6 - 3)",
		"min(1, 2, 3)", "1d4[fire] + 2[magic]", "4dF", "dF", "1d1x", "1d6rr<=6", "(1d4)[cold]",
		"1000000000d6", "1d1000000000000", "100d100*100d100*100d100*100d100*100d100", "9007199254740991*2",
		"4d6kh99999999999999999999", "99999999999999999999999999999999999999999", "@twice0", "@self", "@big",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, formula string) {
		checkNoPanic(t, formula)
	})
}

// TestGrammar covers the tabletop's common dice grammar that fifth-edition
// formulas use (the dice of the tabletop the dnd5e system runs on): reroll
// (r once, rr until it no longer matches), explode (x recursively, xo
// once), min and max, count successes (cs), max() and min(), flavour
// labels and Fate dice. Each case gives the dice the source hands out and
// what every die ends as.
func TestGrammar(t *testing.T) {
	t.Parallel()
	type res = DieResult
	tests := []struct {
		formula string
		rolls   []int
		total   float64
		shown   string
		results []DieResult // of the first dice term
	}{
		// r: a die showing the lowest face is rerolled once, and the new
		// die stands even when it is a 1 again.
		{"2d6r", []int{1, 4, 1}, 5, "2d6r", []res{{Result: 1, Rerolled: true}, {Result: 4, Active: true}, {Result: 1, Active: true}}},
		{"2d6r<3", []int{2, 5, 6}, 11, "2d6r<3", []res{{Result: 2, Rerolled: true}, {Result: 5, Active: true}, {Result: 6, Active: true}}},
		{"1d20r1", []int{1, 1}, 1, "1d20r1", []res{{Result: 1, Rerolled: true}, {Result: 1, Active: true}}},
		// rr: rerolled again as long as it matches.
		{"1d20rr1", []int{1, 1, 7}, 7, "1d20rr1", []res{{Result: 1, Rerolled: true}, {Result: 1, Rerolled: true}, {Result: 7, Active: true}}},
		{"1d6rr<=2", []int{2, 1, 3}, 3, "1d6rr<=2", []res{{Result: 2, Rerolled: true}, {Result: 1, Rerolled: true}, {Result: 3, Active: true}}},
		// x: a die showing the highest face adds a die, which may explode
		// in turn; xo explodes only the dice rolled before it.
		{"1d6x", []int{6, 6, 2}, 14, "1d6x", []res{{Result: 6, Active: true, Exploded: true}, {Result: 6, Active: true, Exploded: true}, {Result: 2, Active: true}}},
		{"1d6xo", []int{6, 6}, 12, "1d6xo", []res{{Result: 6, Active: true, Exploded: true}, {Result: 6, Active: true}}},
		{"2d10x>=9", []int{9, 3, 10, 1}, 23, "2d10x>=9", []res{{Result: 9, Active: true, Exploded: true}, {Result: 3, Active: true}, {Result: 10, Active: true, Exploded: true}, {Result: 1, Active: true}}},
		// min and max raise or lower each die.
		{"2d20min10", []int{3, 15}, 25, "2d20min10", []res{{Result: 10, Active: true}, {Result: 15, Active: true}}},
		{"2d6max3", []int{5, 2}, 5, "2d6max3", []res{{Result: 3, Active: true}, {Result: 2, Active: true}}},
		// cs counts the dice that match rather than adding them.
		{"4d10cs>=7", []int{7, 2, 10, 6}, 2, "4d10cs>=7", []res{{Result: 7, Active: true, Success: true}, {Result: 2, Active: true}, {Result: 10, Active: true, Success: true}, {Result: 6, Active: true}}},
		{"3d6cs", []int{6, 5, 6}, 2, "3d6cs", []res{{Result: 6, Active: true, Success: true}, {Result: 5, Active: true}, {Result: 6, Active: true, Success: true}}},
		// Modifiers apply in the order written: keep after reroll.
		{"2d20r1kh", []int{1, 8, 12}, 12, "2d20r1kh", []res{{Result: 1, Rerolled: true}, {Result: 8}, {Result: 12, Active: true}}},
		// Fate dice show -1, 0 or +1.
		{"4dF", []int{1, 2, 3, 3}, 1, "4dF", []res{{Result: -1, Active: true}, {Result: 0, Active: true}, {Result: 1, Active: true}, {Result: 1, Active: true}}},
		{"dF + 2", []int{1}, 1, "1dF + 2", []res{{Result: -1, Active: true}}},
		// Flavour labels ride along and change nothing.
		{"1d4[fire] + 2[magic]", []int{3}, 5, "1d4[fire] + 2[magic]", []res{{Result: 3, Active: true}}},
		// max() and min() take any number of arguments; the hit die of the
		// system never heals less than 0: max(0, 1d6 + CON).
		{"max(0, 1d6 - 3)", []int{1}, 0, "max(0, 1d6 - 3)", []res{{Result: 1, Active: true}}},
		{"max(0, 1d6 - 3)", []int{6}, 3, "max(0, 1d6 - 3)", []res{{Result: 6, Active: true}}},
		{"min(1d20, 15, 18)", []int{19}, 15, "min(1d20, 15, 18)", []res{{Result: 19, Active: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.formula, func(t *testing.T) {
			t.Parallel()
			got, err := Evaluate(tt.formula, nil, NewSequence(tt.rolls...))
			if err != nil {
				t.Fatal(err)
			}
			if got.Total != tt.total || got.Formula != tt.shown {
				t.Fatalf("total %v formula %q, want %v %q", got.Total, got.Formula, tt.total, tt.shown)
			}
			if len(got.Dice) == 0 || !slices.Equal(got.Dice[0].Results, tt.results) {
				t.Fatalf("dice %+v, want %+v", got.Dice, tt.results)
			}
			// The evaluated formula reads back to the same total with the
			// same dice.
			again, err := Evaluate(got.Formula, nil, NewSequence(tt.rolls...))
			if err != nil || again.Total != got.Total {
				t.Fatalf("%q again: %v %v", got.Formula, again.Total, err)
			}
		})
	}
	got, _ := Evaluate("1d4[fire] + 1d6[cold]", nil, NewSequence(2, 3))
	if got.Dice[0].Flavor != "fire" || got.Dice[1].Flavor != "cold" {
		t.Fatalf("flavours %q %q", got.Dice[0].Flavor, got.Dice[1].Flavor)
	}
	if got, _ := Evaluate("4dF", nil, NewSequence(1)); !got.Dice[0].Fate || got.Dice[0].Faces != 3 {
		t.Fatalf("Fate die %+v", got.Dice[0])
	}
}
