//go:build race

package racesuppress

const raceEnabled = true
