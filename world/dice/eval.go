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
	// Number is how many dice the term names (rerolls and explosions
	// add results, not to Number).
	Number int `json:"number"`
	// Faces is the size of each die (3 for a Fate die).
	Faces int `json:"faces"`
	// Fate marks Fate dice (dF), whose faces are -1, 0 and +1.
	Fate bool `json:"fate"`
	// Modifiers are the modifiers as written, normalised (`kh`, `dl1`,
	// `r<3`, `x`, `min10`, `cs>=5`).
	Modifiers []string `json:"modifiers"`
	// Flavor is the term's flavour label (`fire` of `1d4[fire]`), "" when
	// none.
	Flavor string `json:"flavor"`
	// Results are the dice in the order rolled, rerolls and explosions
	// included.
	Results []DieResult `json:"results"`
	// Total is the sum of the active results, or with cs the number of
	// active results that succeed.
	Total int `json:"total"`
}

// DieResult is one die: what it showed and whether it counts.
type DieResult struct {
	Result int  `json:"result"`
	Active bool `json:"active"`
	// Rerolled marks a die replaced by a reroll (it is no longer active).
	Rerolled bool `json:"rerolled,omitempty"`
	// Exploded marks a die that made another one be rolled.
	Exploded bool `json:"exploded,omitempty"`
	// Success marks a die a cs modifier counts.
	Success bool `json:"success,omitempty"`
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
	f, err := Parse(formula)
	if err != nil {
		return Result{}, err
	}
	return f.Eval(src, data)
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
		args := make([]value, len(n.args))
		for i, a := range n.args {
			arg, err := ev.eval(a, text, depth+1)
			if err != nil {
				return value{}, err
			}
			args[i] = arg
		}
		v := args[0].value
		switch n.name {
		case "floor":
			v = math.Floor(v)
		case "ceil":
			v = math.Ceil(v)
		case "round":
			v = math.Round(v)
		case "abs":
			v = math.Abs(v)
		case "max":
			for _, a := range args[1:] {
				v = math.Max(v, a.value)
			}
		case "min":
			for _, a := range args[1:] {
				v = math.Min(v, a.value)
			}
		}
		formulas := make([]string, len(args))
		for i, a := range args {
			formulas[i] = a.formula
		}
		return value{value: v, formula: n.name + "(" + strings.Join(formulas, ", ") + ")", result: formatNumber(v)}, nil
	case *flavorNode:
		before := len(ev.dice)
		inner, err := ev.eval(n.inner, text, depth+1)
		if err != nil {
			return value{}, err
		}
		if _, isDice := n.inner.(*diceNode); isDice && len(ev.dice) == before+1 {
			ev.dice[before].Flavor = n.label
		}
		inner.formula += "[" + n.label + "]"
		return inner, nil
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

// roll rolls a dice term and applies its modifiers in the order written.
// Rerolls and explosions roll more dice; every die rolled counts against
// MaxDice, so a term that would go on rolling (`1d1x`) is refused.
func (ev *evaluator) roll(n *diceNode, text string) (value, error) {
	t := &term{ev: ev, node: n, text: text}
	d := Die{Number: n.count, Faces: n.faces, Fate: n.fate, Modifiers: []string{}, Results: make([]DieResult, 0, n.count)}
	t.die = &d
	for range n.count {
		if err := t.add(); err != nil {
			return value{}, err
		}
	}
	counting := false
	for _, m := range n.mods {
		d.Modifiers = append(d.Modifiers, m.text)
		if keep, highest, ok := m.keepDrop(); ok {
			applyKeepDrop(d.Results, keep, highest, m.n)
			continue
		}
		var err error
		switch m.kind {
		case "r", "rr":
			err = t.reroll(m)
		case "x", "xo":
			err = t.explode(m)
		case "min":
			for i := range d.Results {
				d.Results[i].Result = max(d.Results[i].Result, m.n)
			}
		case "max":
			for i := range d.Results {
				d.Results[i].Result = min(d.Results[i].Result, m.n)
			}
		case "cs":
			counting = true
			for i, r := range d.Results {
				d.Results[i].Success = r.Active && t.matches(m, r.Result, t.highest())
			}
		}
		if err != nil {
			return value{}, err
		}
	}
	for _, r := range d.Results {
		switch {
		case !r.Active:
		case counting && r.Success:
			d.Total++
		case !counting:
			d.Total += r.Result
		}
	}
	ev.dice = append(ev.dice, d)
	size := strconv.Itoa(n.faces)
	if n.fate {
		size = "F"
	}
	formula := strconv.Itoa(n.count) + "d" + size + strings.Join(d.Modifiers, "")
	return value{value: float64(d.Total), formula: formula, result: strconv.Itoa(d.Total)}, nil
}

// term is a dice term being rolled.
type term struct {
	ev   *evaluator
	node *diceNode
	text string
	die  *Die
}

// add rolls one more die of the term, counting it against MaxDice.
func (t *term) add() error {
	t.ev.rolled++
	if t.ev.rolled > MaxDice {
		return &Error{Formula: t.text, Pos: t.node.at, Msg: fmt.Sprintf("rolls more than %d dice, rerolls and explosions included", MaxDice), TooLarge: true}
	}
	v := t.ev.src.Roll(t.node.faces)
	if t.node.fate {
		v -= 2
	}
	t.die.Results = append(t.die.Results, DieResult{Result: v, Active: true})
	return nil
}

// lowest and highest are the faces of the term's dice at either end.
func (t *term) lowest() int {
	if t.node.fate {
		return -1
	}
	return 1
}

func (t *term) highest() int {
	if t.node.fate {
		return 1
	}
	return t.node.faces
}

// matches tells whether a result meets a modifier's condition; without
// one, whether it equals def.
func (t *term) matches(m modifier, result, def int) bool {
	switch m.compare {
	case "<":
		return result < m.target
	case "<=":
		return result <= m.target
	case ">":
		return result > m.target
	case ">=":
		return result >= m.target
	case "=":
		return result == m.target
	}
	return result == def
}

// reroll rerolls the active dice that match: with r each die once (the
// new die stands whatever it shows), with rr again as long as the new die
// matches.
func (t *term) reroll(m modifier) error {
	end := len(t.die.Results)
	for i := 0; i < len(t.die.Results); i++ {
		if m.kind == "r" && i >= end {
			break
		}
		r := t.die.Results[i]
		if !r.Active || !t.matches(m, r.Result, t.lowest()) {
			continue
		}
		t.die.Results[i].Rerolled, t.die.Results[i].Active = true, false
		if err := t.add(); err != nil {
			return err
		}
	}
	return nil
}

// explode rolls one more die for each active die that matches: with x the
// new dice may explode in turn, with xo they do not.
func (t *term) explode(m modifier) error {
	end := len(t.die.Results)
	for i := 0; i < len(t.die.Results); i++ {
		if m.kind == "xo" && i >= end {
			break
		}
		r := t.die.Results[i]
		if !r.Active || r.Exploded || !t.matches(m, r.Result, t.highest()) {
			continue
		}
		t.die.Results[i].Exploded = true
		if err := t.add(); err != nil {
			return err
		}
	}
	return nil
}

// applyKeepDrop discards dice among the active ones: keeping the n
// highest (or lowest) discards the rest, dropping them discards those n.
func applyKeepDrop(results []DieResult, keep, highest bool, n int) {
	var active []int
	for i, r := range results {
		if r.Active {
			active = append(active, i)
		}
	}
	// Ranked from the end the modifier names (highest or lowest first);
	// among equal results the earlier die ranks first.
	slices.SortStableFunc(active, func(a, b int) int {
		if highest {
			return results[b].Result - results[a].Result
		}
		return results[a].Result - results[b].Result
	})
	n = min(n, len(active))
	var discard []int
	if keep {
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
