package dice

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Result is an evaluated formula.
type Result struct {
	// Formula is the formula as evaluated: references replaced by their
	// values, spaced the tabletop's way (`1d20 + 5`, `2d20kh - 1`).
	Formula string `json:"formula"`
	// Result shows each term's value: dice by their kept total (`14 + 5`).
	Result string `json:"result"`
	// Total is the formula's value.
	Total float64 `json:"total"`
	// Dice are the dice terms in the order they were rolled.
	Dice []Die `json:"dice"`
}

// Die is one dice term of a formula (`4d6dl1`) and what its dice showed.
type Die struct {
	// Number is how many dice were rolled.
	Number int `json:"number"`
	// Faces is the size of each die.
	Faces int `json:"faces"`
	// Modifiers are the keep/drop modifiers, normalised (`kh`, `dl1`).
	Modifiers []string `json:"modifiers"`
	// Results are the dice in the order rolled.
	Results []DieResult `json:"results"`
	// Total is the sum of the active results.
	Total int `json:"total"`
}

// DieResult is one die: what it showed and whether it counts.
type DieResult struct {
	Result int  `json:"result"`
	Active bool `json:"active"`
}

// Natural returns the first kept result of the first die of the given size
// (the d20 of a check), and whether there is one.
func (r Result) Natural(faces int) (int, bool) {
	for _, d := range r.Dice {
		if d.Faces != faces {
			continue
		}
		for _, res := range d.Results {
			if res.Active {
				return res.Result, true
			}
		}
	}
	return 0, false
}

// Evaluate parses and evaluates a formula against roll data with a source.
func Evaluate(formula string, data map[string]any, src Source) (Result, error) {
	return EvaluateWith(formula, Data(data), src)
}

// EvaluateWith parses and evaluates a formula, reading its references
// through resolve, with a source.
func EvaluateWith(formula string, resolve Resolver, src Source) (Result, error) {
	f, err := Parse(formula)
	if err != nil {
		return Result{}, err
	}
	return f.EvalWith(src, resolve)
}

// Resolver reads roll data for an evaluation: it returns the value at a
// reference's path (`abilities.dex.mod` for `@abilities.dex.mod`), nil when
// there is none, or an error that refuses the reference. The evaluation
// stops at a refusal and returns that error as it is, so a caller can refuse
// references to data the roller may not read (a permission error) rather
// than have them count as 0.
type Resolver func(path string) (any, error)

// Data returns the Resolver that reads a roll data tree: nested maps as the
// tabletop's roll data. Nothing is refused; a missing path is nil.
func Data(data map[string]any) Resolver {
	return func(path string) (any, error) {
		v, _ := lookup(data, path)
		return v, nil
	}
}

// Eval evaluates the formula: rolls its dice from src and replaces its
// references with values from data, a tree of maps as the tabletop's roll
// data (`abilities.dex.mod`). A reference to a number uses it, to a string
// evaluates that string as a formula in turn (effects store bonuses as
// `+1`), to an empty string, null or a missing path gives 0, as in the
// tabletop; anything else is an error.
func (f *Formula) Eval(src Source, data map[string]any) (Result, error) {
	return f.EvalWith(src, Data(data))
}

// EvalWith is Eval with the references read through resolve: a reference
// resolve refuses fails the evaluation with resolve's error.
func (f *Formula) EvalWith(src Source, resolve Resolver) (Result, error) {
	ev := &evaluator{src: src, resolve: resolve, top: f.text}
	v, err := ev.eval(f.root, f.text, 0)
	if err != nil {
		return Result{}, err
	}
	if math.IsNaN(v.value) || math.IsInf(v.value, 0) {
		return Result{}, &Error{Formula: f.text, Msg: "the result is not a finite number"}
	}
	if ev.dice == nil {
		ev.dice = []Die{}
	}
	return Result{Formula: v.formula, Result: v.result, Total: v.value, Dice: ev.dice}, nil
}

// evaluator holds the state of one evaluation.
type evaluator struct {
	src     Source
	resolve Resolver
	top     string
	dice    []Die
	rolled  int
	steps   int // terms evaluated, for MaxSteps
}

// value is an evaluated node: its number and its two printed forms.
type value struct {
	value           float64
	formula, result string
	compound        bool // printed with an operator at its top level
}

func (ev *evaluator) fail(text string, at int, format string, args ...any) error {
	return &Error{Formula: text, Pos: at, Msg: fmt.Sprintf(format, args...)}
}

// eval evaluates a node and checks its value against MaxValue.
func (ev *evaluator) eval(n node, text string, depth int) (value, error) {
	if ev.steps++; ev.steps > MaxSteps {
		return value{}, &Error{Formula: text, Pos: n.pos(), Msg: fmt.Sprintf("takes more than %d steps to evaluate, roll data references included", MaxSteps), TooLarge: true}
	}
	v, err := ev.term(n, text, depth)
	if err == nil && math.Abs(v.value) > MaxValue {
		return value{}, &Error{Formula: text, Pos: n.pos(), Msg: fmt.Sprintf("the result would be beyond ±%d", MaxValue), TooLarge: true}
	}
	return v, err
}

// term evaluates one node.
func (ev *evaluator) term(n node, text string, depth int) (value, error) {
	switch n := n.(type) {
	case *numberNode:
		s := formatNumber(n.value)
		return value{value: n.value, formula: s, result: s}, nil
	case *diceNode:
		return ev.roll(n, text)
	case *refNode:
		return ev.ref(n, text, depth)
	case *groupNode:
		inner, err := ev.eval(n.inner, text, depth+1)
		if err != nil {
			return value{}, err
		}
		return value{value: inner.value, formula: "(" + inner.formula + ")", result: "(" + inner.result + ")"}, nil
	case *funcNode:
		arg, err := ev.eval(n.arg, text, depth+1)
		if err != nil {
			return value{}, err
		}
		var v float64
		switch n.name {
		case "floor":
			v = math.Floor(arg.value)
		case "ceil":
			v = math.Ceil(arg.value)
		case "round":
			v = math.Round(arg.value)
		case "abs":
			v = math.Abs(arg.value)
		}
		return value{value: v, formula: n.name + "(" + arg.formula + ")", result: formatNumber(v)}, nil
	case *unaryNode:
		arg, err := ev.eval(n.arg, text, depth+1)
		if err != nil {
			return value{}, err
		}
		if n.op == '+' {
			return arg, nil
		}
		return value{value: -arg.value, formula: negate(arg.formula, arg.compound), result: negate(arg.result, arg.compound)}, nil
	case *binaryNode:
		left, err := ev.eval(n.left, text, depth+1)
		if err != nil {
			return value{}, err
		}
		right, err := ev.eval(n.right, text, depth+1)
		if err != nil {
			return value{}, err
		}
		var v float64
		switch n.op {
		case '+':
			v = left.value + right.value
		case '-':
			v = left.value - right.value
		case '*':
			v = left.value * right.value
		case '/':
			if right.value == 0 {
				return value{}, ev.fail(text, n.at, "division by zero")
			}
			v = left.value / right.value
		}
		return value{
			value:    v,
			formula:  join(left.formula, n.op, right.formula),
			result:   join(left.result, n.op, right.result),
			compound: true,
		}, nil
	}
	return value{}, ev.fail(text, 0, "unknown term")
}

// join prints a binary operation, folding a negative right operand into the
// operator the way the tabletop shows it (`1d20 - 1`, not `1d20 + -1`).
func join(left string, op byte, right string) string {
	if rest, ok := strings.CutPrefix(right, "-"); ok && (op == '+' || op == '-') {
		if op == '+' {
			op = '-'
		} else {
			op = '+'
		}
		right = rest
	}
	return left + " " + string(op) + " " + right
}

// negate prints a negation, parenthesising what needs it.
func negate(s string, compound bool) string {
	if compound {
		return "-(" + s + ")"
	}
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		return rest
	}
	return "-" + s
}

// roll rolls a dice term and applies its modifiers.
func (ev *evaluator) roll(n *diceNode, text string) (value, error) {
	ev.rolled += n.count
	if ev.rolled > MaxDice {
		return value{}, &Error{Formula: text, Pos: n.at, Msg: fmt.Sprintf("rolls more than %d dice", MaxDice), TooLarge: true}
	}
	d := Die{Number: n.count, Faces: n.faces, Modifiers: []string{}, Results: make([]DieResult, n.count)}
	for i := range d.Results {
		d.Results[i] = DieResult{Result: ev.src.Roll(n.faces), Active: true}
	}
	for _, m := range n.mods {
		applyKeepDrop(d.Results, m)
		d.Modifiers = append(d.Modifiers, m.text)
	}
	for _, r := range d.Results {
		if r.Active {
			d.Total += r.Result
		}
	}
	ev.dice = append(ev.dice, d)
	formula := strconv.Itoa(n.count) + "d" + strconv.Itoa(n.faces) + strings.Join(d.Modifiers, "")
	return value{value: float64(d.Total), formula: formula, result: strconv.Itoa(d.Total)}, nil
}

// applyKeepDrop discards dice among the active ones: keeping the n highest
// (or lowest) discards the rest, dropping them discards those n.
func applyKeepDrop(results []DieResult, m keepDrop) {
	var active []int
	for i, r := range results {
		if r.Active {
			active = append(active, i)
		}
	}
	// Ranked from the end the modifier names (highest or lowest first);
	// among equal results the earlier die ranks first.
	slices.SortStableFunc(active, func(a, b int) int {
		if m.highest {
			return results[b].Result - results[a].Result
		}
		return results[a].Result - results[b].Result
	})
	n := min(m.n, len(active))
	var discard []int
	if m.keep {
		discard = active[n:]
	} else {
		discard = active[:n]
	}
	for _, i := range discard {
		results[i].Active = false
	}
}

// ref evaluates a roll data reference.
func (ev *evaluator) ref(n *refNode, text string, depth int) (value, error) {
	raw, err := ev.resolve(n.path)
	if err != nil {
		return value{}, err
	}
	switch v := raw.(type) {
	case nil:
		return value{formula: "0", result: "0"}, nil
	case float64:
		s := formatNumber(v)
		return value{value: v, formula: s, result: s}, nil
	case int:
		s := strconv.Itoa(v)
		return value{value: float64(v), formula: s, result: s}, nil
	case bool:
		if v {
			return value{value: 1, formula: "1", result: "1"}, nil
		}
		return value{formula: "0", result: "0"}, nil
	case string:
		if strings.TrimSpace(v) == "" {
			return value{formula: "0", result: "0"}, nil
		}
		if depth > MaxDepth {
			return value{}, &Error{Formula: text, Pos: n.at, Msg: fmt.Sprintf("roll data references nest deeper than %d levels", MaxDepth), TooLarge: true}
		}
		sub, err := Parse(v)
		if err != nil {
			var de *Error
			if errors.As(err, &de) && de.TooLarge {
				// Name the limit the stored formula breaks, rather than
				// call it no formula.
				return value{}, &Error{Formula: text, Pos: n.at, Msg: fmt.Sprintf("@%s holds '%s': %s", n.path, truncate(v), de.Msg), TooLarge: true}
			}
			return value{}, ev.fail(text, n.at, "@%s holds '%s', which is not a formula", n.path, truncate(v))
		}
		inner, err := ev.eval(sub.root, v, depth+1)
		if err != nil {
			return value{}, err
		}
		if inner.compound {
			inner.formula = "(" + inner.formula + ")"
			inner.result = "(" + inner.result + ")"
			inner.compound = false
		}
		return inner, nil
	}
	return value{}, ev.fail(text, n.at, "@%s is not a number", n.path)
}

// lookup follows a dotted path through nested maps.
func lookup(data map[string]any, path string) (any, bool) {
	var cur any = data
	for part := range strings.SplitSeq(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// formatNumber prints a number the way JavaScript does for the values a
// roll produces: integers without a decimal point.
func formatNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Check returns the d20 term of a check: `1d20`, `2d20kh` with advantage,
// `2d20kl` with disadvantage; both together cancel out.
func Check(advantage, disadvantage bool) string {
	switch {
	case advantage && !disadvantage:
		return "2d20kh"
	case disadvantage && !advantage:
		return "2d20kl"
	}
	return "1d20"
}
