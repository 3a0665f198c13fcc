// Package dice parses and evaluates dice formulas the way the tabletop's
// rolls read them: `1d20 + @abilities.dex.mod + @prof`, `2d20kh`, `4d6dl1`,
// `floor((1d8 + 3) / 2)`.
//
// The grammar is the tabletop's common one that fifth-edition formulas
// use: `NdM` (`d%` for d100, `dF` for Fate dice of -1, 0 and +1) with
// modifiers applied in the order written — keep and drop (`kh`, `kl`,
// `dh`, `dl`, each with a count), reroll once (`r`) or until the die no
// longer matches (`rr`), explode recursively (`x`) or once (`xo`), `min`
// and `max` on each die, and count successes (`cs`), where rerolls,
// explosions and successes take a condition (`r<3`, `x>=9`, `cs>=7`; a
// bare number means equal, none means the lowest face for rerolls and the
// highest for the others); `+ - * /` with parentheses; the functions
// `floor`, `ceil`, `round`, `abs`, `max` and `min` (the last two of any
// number of arguments); flavour labels after a term (`1d4[fire]`); and
// `@path` references to roll data.
//
// A formula is parsed once ([Parse]) and evaluated against roll data with a
// [Source] of random numbers ([Formula.Eval]); [Evaluate] does both. The
// result ([Result]) carries the total, the formula as evaluated (references
// replaced by their values), a result string such as `14 + 5`, and every die
// with its results, active or discarded.
//
// Randomness is injected: [NewRandom] is seeded from the operating system's
// cryptographic generator, [NewSeeded] repeats a sequence for a seed, and
// [NewSequence] hands out fixed results so tests can assert exact outcomes.
package dice

import (
	crand "crypto/rand"
	"math/rand/v2"
	"sync"
)

// Source produces die results. Roll returns a uniformly chosen integer from
// 1 to faces (faces ≥ 1). Implementations must be safe for concurrent use.
type Source interface {
	Roll(faces int) int
}

// lockedRand is a math/rand/v2 generator behind a mutex.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Roll(faces int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(faces) + 1
}

// NewRandom returns a source seeded from the operating system's
// cryptographic random generator (a ChaCha8 stream), for real play.
func NewRandom() Source {
	var seed [32]byte
	if _, err := crand.Read(seed[:]); err != nil {
		panic("dice: no operating system randomness: " + err.Error())
	}
	return &lockedRand{r: rand.New(rand.NewChaCha8(seed))}
}

// NewSeeded returns a source that repeats the same results for the same
// seed, for reproducible runs.
func NewSeeded(seed uint64) Source {
	return &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Sequence is a source that returns fixed results in order, starting over
// when it reaches the end, for tests. A result larger than the die's faces
// is wrapped into range (a 15 on a d6 gives 3); a result below 1 gives 1.
type Sequence struct {
	mu     sync.Mutex
	values []int
	next   int
}

// NewSequence returns a source handing out values in order; with no values
// every die shows 1.
func NewSequence(values ...int) *Sequence {
	return &Sequence{values: values}
}

// Roll returns the next value of the sequence, fitted to the die.
func (s *Sequence) Roll(faces int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.values) == 0 {
		return 1
	}
	v := s.values[s.next%len(s.values)]
	s.next++
	if v < 1 {
		return 1
	}
	return (v-1)%faces + 1
}

// Used reports how many results the sequence has handed out.
func (s *Sequence) Used() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}
