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

// String returns the formula as it was written.
func (f *Formula) String() string { return f.text }

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
		mods  []keepDrop
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
		arg  node
	}
)

func (n *numberNode) pos() int { return n.at }
func (n *diceNode) pos() int   { return n.at }
func (n *refNode) pos() int    { return n.at }
func (n *unaryNode) pos() int  { return n.at }
func (n *binaryNode) pos() int { return n.at }
func (n *groupNode) pos() int  { return n.at }
func (n *funcNode) pos() int   { return n.at }

// keepDrop is one keep/drop modifier of a dice term: keep or drop the n
// highest or lowest of the dice still active.
type keepDrop struct {
	keep    bool
	highest bool
	n       int
	text    string // as written, normalised: kh, kl2, dl1 ...
}

// functions are the functions a formula may call, each of one argument.
var functions = map[string]bool{"floor": true, "ceil": true, "round": true, "abs": true}

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
	return p.primary(depth)
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
		if !functions[name] {
			return nil, p.fail(at, "unknown name '%s' (functions are floor, ceil, round and abs; roll data is written @path)", p.src[start:p.i])
		}
		if p.peek() != '(' {
			return nil, p.fail(p.i+1, "'%s' must be followed by '('", name)
		}
		p.i++
		arg, err := p.expr(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.peek() != ')' {
			if p.i >= len(p.src) {
				return nil, p.fail(at, "unclosed '(' of %s", name)
			}
			return nil, p.unexpected()
		}
		p.i++
		return &funcNode{at: at, name: name, arg: arg}, nil
	}
	return nil, p.unexpected()
}

// diceFollows reports whether the byte at i starts a die size (a digit or %).
func (p *parser) diceFollows(i int) bool {
	return i < len(p.src) && (isDigit(p.src[i]) || p.src[i] == '%')
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
// (or `d%`) and any keep/drop modifiers.
func (p *parser) diceTerm(at int, count float64) (node, error) {
	p.i++ // the d
	faces := 100
	if p.src[p.i] == '%' {
		p.i++
	} else {
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
	d := &diceNode{at: at, count: int(count), faces: faces}
	p.dice += d.count
	for p.i < len(p.src) {
		mod, ok, err := p.keepDrop()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		d.mods = append(d.mods, mod)
	}
	if p.i < len(p.src) && (isLetter(p.src[p.i]) || isDigit(p.src[p.i])) {
		return nil, p.fail(p.i+1, "unknown dice modifier '%s' (use kh, kl, dh or dl)", p.word())
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

// keepDrop parses one modifier (`kh`, `kl`, `k`, `dh`, `dl`, each with an
// optional count) at the current position.
func (p *parser) keepDrop() (keepDrop, bool, error) {
	rest := strings.ToLower(p.src[p.i:])
	var m keepDrop
	var n int
	switch {
	case strings.HasPrefix(rest, "kh"):
		m, n = keepDrop{keep: true, highest: true}, 2
	case strings.HasPrefix(rest, "kl"):
		m, n = keepDrop{keep: true, highest: false}, 2
	case strings.HasPrefix(rest, "dh"):
		m, n = keepDrop{keep: false, highest: true}, 2
	case strings.HasPrefix(rest, "dl"):
		m, n = keepDrop{keep: false, highest: false}, 2
	case strings.HasPrefix(rest, "k") && (len(rest) == 1 || !isLetter(rest[1])):
		m, n = keepDrop{keep: true, highest: true}, 1
	default:
		return keepDrop{}, false, nil
	}
	at := p.i + 1
	p.i += n
	start := p.i
	for p.i < len(p.src) && isDigit(p.src[p.i]) {
		p.i++
	}
	m.n = 1
	if start < p.i {
		v, err := strconv.Atoi(p.src[start:p.i])
		if err != nil || v > MaxDice {
			return keepDrop{}, false, &Error{Formula: p.src, Pos: at, Msg: fmt.Sprintf("a keep or drop count may be at most %d", MaxDice), TooLarge: true}
		}
		m.n = v
	}
	m.text = strings.ToLower(p.src[at-1 : p.i])
	return m, true, nil
}

func isDigit(c byte) bool  { return c >= '0' && c <= '9' }
func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isPathByte(c byte) bool {
	return isLetter(c) || isDigit(c) || c == '.' || c == '_'
}
