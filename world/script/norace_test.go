//go:build !race

package script_test

// raceBuild reports a test binary built with the race detector (see
// race_test.go).
const raceBuild = false
