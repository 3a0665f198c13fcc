//go:build race

package script_test

// raceBuild reports a test binary built with the race detector, whose
// workers run without their memory ceiling.
const raceBuild = true
