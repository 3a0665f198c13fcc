package dice

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Limits that keep a formula from costing more than a roll should. A
// formula past one is refused with an [Error] whose TooLarge is set and
// whose message names the limit; it is never rolled in part or answered
// with a made-up total.
const (
	// MaxFormulaLength is the longest formula accepted, in bytes.
	MaxFormulaLength = 1000
	// MaxDice is the most dice one formula may roll in total, the formulas
	// its roll data references hold included.
	MaxDice = 1000
	// MaxFaces is the largest die.
	MaxFaces = 10000
	// MaxValue bounds every number: those written in a formula, those
	// read from roll data, and every partial result and total. It is the
	// largest integer a float64 (and a JSON number in JavaScript) holds
	// exactly, so a total is never a rounded guess.
	MaxValue = 1<<53 - 1
	// MaxDepth bounds nested parentheses, functions, signs and roll data
	// references that hold formulas.
	MaxDepth = 32
	// MaxSteps bounds the terms one evaluation may work through, roll
	// data references included: references that each name others twice
	// would otherwise take 2^MaxDepth steps.
	MaxSteps = 10000
)

// Error is a formula that cannot be parsed or evaluated. Pos is the 1-based
// byte position the problem was found at (0 when it concerns the whole
// formula).
type Error struct {
	Formula string
	Pos     int
	Msg     string
	// TooLarge marks a formula refused for its size rather than its syntax.
	TooLarge bool
}

func (e *Error) Error() string {
	if e.Pos > 0 {
		return fmt.Sprintf("Invalid formula '%s' at position %d: %s", e.Formula, e.Pos, e.Msg)
	}
	return fmt.Sprintf("Invalid formula '%s': %s", e.Formula, e.Msg)
}

// Formula is a parsed formula, ready to evaluate any number of times. It is
// immutable and safe for concurrent use.
type Formula struct {
	text string
	root node
}

// node is one element of a parsed formula.
type node interface{ pos() int }

type (
	numberNode struct {
		at    int
		value float64
	}
	diceNode struct {
		at    int
		count int
		faces int
		fate  bool // a Fate die (dF): faces -1, 0 and +1
		mods  []modifier
	}
	refNode struct {
		at   int
		path string
	}
	unaryNode struct {
		at  int
		op  byte // '+' or '-'
		arg node
	}
	binaryNode struct {
		at          int
		op          byte // + - * /
		left, right node
	}
	groupNode struct {
		at    int
		inner node
	}
	funcNode struct {
		at   int
		name string
		args []node
	}
	// flavorNode is a term with a flavour label (`1d4[fire]`), which the
	// tabletop shows and damage rolls read as their type; it does not
	// change the value.
	flavorNode struct {
		at    int
		inner node
		label string
	}
)

func (n *numberNode) pos() int { return n.at }
func (n *diceNode) pos() int   { return n.at }
func (n *refNode) pos() int    { return n.at }
func (n *unaryNode) pos() int  { return n.at }
func (n *binaryNode) pos() int { return n.at }
func (n *groupNode) pos() int  { return n.at }
func (n *funcNode) pos() int   { return n.at }
func (n *flavorNode) pos() int { return n.at }

// modifier is one modifier of a dice term, applied in the order written,
// as the tabletop's dice do:
//
//   - kh, kl, k, dh, dl (with an optional count): keep or drop the n
//     highest or lowest of the dice still active;
//   - r (once) and rr (until it no longer matches): reroll the dice that
//     match a condition, by default those showing the lowest face;
//   - x (until it no longer matches) and xo (once): roll one more die for
//     each die that matches, by default those showing the highest face;
//   - min and max: raise or lower each die to a value;
//   - cs: the term counts the active dice that match instead of adding
//     them up (by default those showing the highest face).
//
// A condition is a comparison (=, <, <=, >, >=) and a number; a bare
// number means equal to it.
type modifier struct {
	kind    string // kh kl dh dl r rr x xo min max cs
	n       int    // the count of a keep/drop, the value of min/max
	compare string // the condition's comparison, "" for the default
	target  int    // the condition's number
	text    string // as written, normalised: kh, dl1, r<3, x, min10, cs>=5
}

// keepDrop reports whether a modifier keeps or drops dice, and which.
func (m modifier) keepDrop() (keep, highest, ok bool) {
	switch m.kind {
	case "kh":
		return true, true, true
	case "kl":
		return true, false, true
	case "dh":
		return false, true, true
	case "dl":
		return false, false, true
	}
	return false, false, false
}

// functions are the functions a formula may call, with the least and the
// most arguments each takes (0: no limit).
var functions = map[string][2]int{
	"floor": {1, 1}, "ceil": {1, 1}, "round": {1, 1}, "abs": {1, 1},
	"max": {1, 0}, "min": {1, 0},
}

// maxArgs bounds the arguments of max() and min().
const maxArgs = 100

// Parse parses a formula. An empty formula is an error.
func Parse(formula string) (*Formula, error) {
	p := &parser{src: formula}
	if len(formula) > MaxFormulaLength {
		return nil, &Error{Formula: truncate(formula), Msg: fmt.Sprintf("longer than %d characters", MaxFormulaLength), TooLarge: true}
	}
	p.skipSpace()
	if p.i >= len(p.src) {
		return nil, p.fail(0, "the formula is empty")
	}
	root, err := p.expr(0)
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.i < len(p.src) {
		return nil, p.unexpected()
	}
	if p.dice > MaxDice {
		return nil, &Error{Formula: formula, Msg: fmt.Sprintf("rolls %d dice, more than %d", p.dice, MaxDice), TooLarge: true}
	}
	return &Formula{text: formula, root: root}, nil
}

// tooLargeNumber refuses a number past MaxValue.
func tooLargeNumber(formula string, at int) error {
	return &Error{Formula: formula, Pos: at, Msg: fmt.Sprintf("numbers may be at most %d", MaxValue), TooLarge: true}
}

// truncate shortens a formula for an error message.
func truncate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// parser is a recursive-descent parser over the formula's bytes.
type parser struct {
	src  string
	i    int
	dice int // dice rolled by the whole formula so far
}

func (p *parser) fail(at int, format string, args ...any) error {
	return &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf(format, args...)}
}

// unexpected fails at the current position, naming what is there.
func (p *parser) unexpected() error {
	if p.i >= len(p.src) {
		return p.fail(len(p.src)+1, "unexpected end of formula")
	}
	return p.fail(p.i+1, "unexpected '%c'", p.src[p.i])
}

func (p *parser) skipSpace() {
	for p.i < len(p.src) && (p.src[p.i] == ' ' || p.src[p.i] == '\t' || p.src[p.i] == '\n' || p.src[p.i] == '\r') {
		p.i++
	}
}

// peek returns the next byte after spaces, or 0 at the end.
func (p *parser) peek() byte {
	p.skipSpace()
	if p.i >= len(p.src) {
		return 0
	}
	return p.src[p.i]
}

// expr parses a sum: term (('+'|'-') term)*.
func (p *parser) expr(depth int) (node, error) {
	if depth > MaxDepth {
		return nil, &Error{Formula: p.src, Pos: p.i + 1, Msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth), TooLarge: true}
	}
	left, err := p.term(depth)
	if err != nil {
		return nil, err
	}
	for {
		c := p.peek()
		if c != '+' && c != '-' {
			return left, nil
		}
		at := p.i + 1
		p.i++
		right, err := p.term(depth)
		if err != nil {
			return nil, err
		}
		left = &binaryNode{at: at, op: c, left: left, right: right}
	}
}

// term parses a product: unary (('*'|'/') unary)*.
func (p *parser) term(depth int) (node, error) {
	left, err := p.unary(depth)
	if err != nil {
		return nil, err
	}
	for {
		c := p.peek()
		if c != '*' && c != '/' {
			return left, nil
		}
		at := p.i + 1
		p.i++
		right, err := p.unary(depth)
		if err != nil {
			return nil, err
		}
		left = &binaryNode{at: at, op: c, left: left, right: right}
	}
}

// unary parses signs in front of a primary.
func (p *parser) unary(depth int) (node, error) {
	c := p.peek()
	if c == '+' || c == '-' {
		at := p.i + 1
		p.i++
		if depth > MaxDepth {
			return nil, &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf("nested deeper than %d levels", MaxDepth), TooLarge: true}
		}
		arg, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &unaryNode{at: at, op: c, arg: arg}, nil
	}
	at := p.i + 1
	n, err := p.primary(depth)
	if err != nil {
		return nil, err
	}
	return p.flavor(at, n)
}

// flavor reads a flavour label written right after a term (`1d4[fire]`).
func (p *parser) flavor(at int, n node) (node, error) {
	if p.i >= len(p.src) || p.src[p.i] != '[' {
		return n, nil
	}
	end := strings.IndexAny(p.src[p.i+1:], "[]")
	if end < 0 || p.src[p.i+1+end] != ']' {
		return nil, p.fail(p.i+1, "unclosed '[' of a flavour label")
	}
	label := p.src[p.i+1 : p.i+1+end]
	p.i += end + 2
	return &flavorNode{at: at, inner: n, label: label}, nil
}

// arityText says how many arguments a function takes.
func arityText(arity [2]int) string {
	switch {
	case arity[0] == arity[1]:
		return "exactly one argument"
	case arity[1] == 0:
		return "at least one argument"
	}
	return fmt.Sprintf("from %d to %d arguments", arity[0], arity[1])
}

// primary parses a number, a dice term, a reference, a function call or a
// parenthesised formula.
func (p *parser) primary(depth int) (node, error) {
	c := p.peek()
	at := p.i + 1
	switch {
	case c == 0:
		return nil, p.unexpected()
	case c == '(':
		p.i++
		inner, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			if p.i >= len(p.src) {
				return nil, p.fail(at, "unclosed '('")
			}
			return nil, p.unexpected()
		}
		p.i++
		return &groupNode{at: at, inner: inner}, nil
	case c == '@':
		p.i++
		start := p.i
		for p.i < len(p.src) && isPathByte(p.src[p.i]) {
			p.i++
		}
		path := strings.TrimRight(p.src[start:p.i], ".")
		p.i = start + len(path)
		if path == "" || path[0] == '.' {
			return nil, p.fail(at, "'@' must be followed by a roll data path such as @abilities.dex.mod")
		}
		return &refNode{at: at, path: path}, nil
	case isDigit(c) || c == '.':
		v, err := p.number()
		if err != nil {
			return nil, err
		}
		if p.i < len(p.src) && (p.src[p.i] == 'd' || p.src[p.i] == 'D') && p.diceFollows(p.i+1) {
			if v > MaxDice {
				return nil, &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf("at most %d dice may be rolled", MaxDice), TooLarge: true}
			}
			if v != math.Trunc(v) || v < 0 {
				return nil, p.fail(at, "the number of dice must be a whole number")
			}
			return p.diceTerm(at, v)
		}
		if v > MaxValue {
			return nil, tooLargeNumber(p.src, at)
		}
		return &numberNode{at: at, value: v}, nil
	case (c == 'd' || c == 'D') && p.diceFollows(p.i+1):
		return p.diceTerm(at, 1)
	case isLetter(c):
		start := p.i
		for p.i < len(p.src) && isLetter(p.src[p.i]) {
			p.i++
		}
		name := strings.ToLower(p.src[start:p.i])
		arity, ok := functions[name]
		if !ok {
			return nil, p.fail(at, "unknown name '%s' (functions are floor, ceil, round, abs, max and min; roll data is written @path)", p.src[start:p.i])
		}
		if p.peek() != '(' {
			return nil, p.fail(p.i+1, "'%s' must be followed by '('", name)
		}
		p.i++
		var args []node
		for {
			arg, err := p.expr(depth + 1)
			if err != nil {
				return nil, err
			}
			args = append(args, arg)
			if p.peek() != ',' {
				break
			}
			if len(args) >= maxArgs {
				return nil, &Error{Formula: p.src, Pos: p.i + 1, Msg: fmt.Sprintf("%s takes at most %d arguments", name, maxArgs), TooLarge: true}
			}
			p.i++
		}
		if p.peek() != ')' {
			if p.i >= len(p.src) {
				return nil, p.fail(at, "unclosed '(' of %s", name)
			}
			return nil, p.unexpected()
		}
		p.i++
		if len(args) < arity[0] || arity[1] > 0 && len(args) > arity[1] {
			return nil, p.fail(at, "%s takes %s", name, arityText(arity))
		}
		return &funcNode{at: at, name: name, args: args}, nil
	}
	return nil, p.unexpected()
}

// diceFollows reports whether the byte at i starts a die size: a digit,
// % or the F of a Fate die (dF).
func (p *parser) diceFollows(i int) bool {
	return i < len(p.src) && (isDigit(p.src[i]) || p.src[i] == '%' || p.isFate(i))
}

// isFate reports whether an F (or f) of a Fate die is at i: one not
// followed by another letter.
func (p *parser) isFate(i int) bool {
	return i < len(p.src) && (p.src[i] == 'F' || p.src[i] == 'f') && (i+1 >= len(p.src) || !isLetter(p.src[i+1]))
}

// number reads a decimal number at the current position.
func (p *parser) number() (float64, error) {
	at := p.i + 1
	start := p.i
	for p.i < len(p.src) && (isDigit(p.src[p.i]) || p.src[p.i] == '.') {
		p.i++
	}
	text := p.src[start:p.i]
	v, err := strconv.ParseFloat(text, 64)
	if errors.Is(err, strconv.ErrRange) {
		return 0, tooLargeNumber(p.src, at)
	}
	if err != nil {
		return 0, p.fail(at, "'%s' is not a number", truncate(text))
	}
	return v, nil
}

// diceTerm parses the rest of a dice term after its count: `d<faces>`
// (or `d%`, or `dF`) and any modifiers.
func (p *parser) diceTerm(at int, count float64) (node, error) {
	p.i++ // the d
	faces, fate := 100, false
	switch {
	case p.src[p.i] == '%':
		p.i++
	case p.isFate(p.i):
		p.i++
		faces, fate = 3, true
	default:
		facesAt := p.i + 1
		start := p.i
		for p.i < len(p.src) && isDigit(p.src[p.i]) {
			p.i++
		}
		n, err := strconv.Atoi(p.src[start:p.i])
		if err != nil || n > MaxFaces {
			return nil, &Error{Formula: p.src, Pos: facesAt, Msg: fmt.Sprintf("dice may have at most %d faces", MaxFaces), TooLarge: true}
		}
		if n < 1 {
			return nil, p.fail(facesAt, "a die needs at least one face")
		}
		faces = n
	}
	if count > MaxDice {
		return nil, &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf("at most %d dice may be rolled", MaxDice), TooLarge: true}
	}
	d := &diceNode{at: at, count: int(count), faces: faces, fate: fate}
	p.dice += d.count
	for p.i < len(p.src) {
		mod, ok, err := p.modifier()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		d.mods = append(d.mods, mod)
	}
	if p.i < len(p.src) && (isLetter(p.src[p.i]) || isDigit(p.src[p.i])) {
		return nil, p.fail(p.i+1, "unknown dice modifier '%s' (use kh, kl, dh, dl, r, rr, x, xo, min, max or cs)", p.word())
	}
	return d, nil
}

// word returns the letters and digits at the current position.
func (p *parser) word() string {
	end := p.i
	for end < len(p.src) && (isLetter(p.src[end]) || isDigit(p.src[end])) {
		end++
	}
	return p.src[p.i:end]
}

// modifierKinds are the modifiers' names, longest first so that a prefix
// never hides a longer name.
var modifierKinds = []string{"min", "max", "kh", "kl", "dh", "dl", "rr", "xo", "cs", "k", "r", "x"}

// modifier parses one modifier of a dice term at the current position
// (see [modifier]).
func (p *parser) modifier() (modifier, bool, error) {
	rest := strings.ToLower(p.src[p.i:])
	var m modifier
	for _, k := range modifierKinds {
		if strings.HasPrefix(rest, k) {
			m.kind = k
			break
		}
	}
	if m.kind == "" || m.kind == "k" && len(rest) > 1 && isLetter(rest[1]) {
		return modifier{}, false, nil
	}
	at := p.i + 1
	p.i += len(m.kind)
	switch m.kind {
	case "k", "kh", "kl", "dh", "dl":
		if m.kind == "k" {
			m.kind = "kh"
		}
		m.n = 1
		if n, ok, err := p.count(at, MaxDice, "a keep or drop count"); err != nil {
			return modifier{}, false, err
		} else if ok {
			m.n = n
		}
	case "min", "max":
		n, ok, err := p.count(at, MaxFaces, "a min or max value")
		if err != nil {
			return modifier{}, false, err
		}
		if !ok {
			return modifier{}, false, p.fail(at, "'%s' must be followed by a number, as in 1d20%s10", m.kind, m.kind)
		}
		m.n = n
	default: // r rr x xo cs: an optional condition
		start := p.i
		for p.i < len(p.src) && (p.src[p.i] == '<' || p.src[p.i] == '>' || p.src[p.i] == '=') {
			p.i++
		}
		m.compare = p.src[start:p.i]
		switch m.compare {
		case "", "=", "<", "<=", ">", ">=":
		default:
			return modifier{}, false, p.fail(start+1, "'%s' is not a comparison (use =, <, <=, > or >=)", m.compare)
		}
		n, ok, err := p.count(at, MaxFaces, "a modifier's target")
		if err != nil {
			return modifier{}, false, err
		}
		switch {
		case ok && m.compare == "":
			m.compare = "="
		case !ok && m.compare != "":
			return modifier{}, false, p.fail(p.i+1, "the comparison of '%s' needs a number", m.kind)
		}
		m.target = n
	}
	m.text = strings.ToLower(p.src[at-1 : p.i])
	return m, true, nil
}

// count reads an optional whole number, at most limit, at the current
// position.
func (p *parser) count(at, limit int, tooLarge string) (int, bool, error) {
	start := p.i
	for p.i < len(p.src) && isDigit(p.src[p.i]) {
		p.i++
	}
	if start == p.i {
		return 0, false, nil
	}
	v, err := strconv.Atoi(p.src[start:p.i])
	if err != nil || v > limit {
		return 0, false, &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf("%s may be at most %d", tooLarge, limit), TooLarge: true}
	}
	return v, true, nil
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isPathByte(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '.' || c == '_'
}
