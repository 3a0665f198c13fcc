//go:build !race

package script

// raceEnabled reports a build with the race detector (see race.go).
const raceEnabled = false
