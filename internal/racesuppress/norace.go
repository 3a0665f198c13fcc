//go:build !race

package racesuppress

const raceEnabled = false
