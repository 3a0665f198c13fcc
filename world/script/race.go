//go:build race

package script

// raceEnabled reports a build with the race detector, whose runtime maps
// terabytes of shadow memory that a data-segment ceiling would refuse.
const raceEnabled = true
