//go:build race

package main

// crashRaceBuild tells the crash test to build the relay with the race
// detector, as the test itself is.
const crashRaceBuild = true
