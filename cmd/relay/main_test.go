package main

import (
	"testing"

	"github.com/tabletop-relay/relay/relaytest"
)

// TestMain lets the test binary serve as an execute-js worker, as the
// relay binary does in main: the relays these tests start in process run
// their scripts by starting the test binary again (see script.Pool).
func TestMain(m *testing.M) {
	relaytest.Main(m)
}
