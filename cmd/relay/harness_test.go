package main

import (
	"log/slog"
	"testing"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

// testRelay is a relay of package relaytest with the test that started
// it, so that this package's helpers can be methods on it.
type testRelay struct {
	*relaytest.Relay
	t *testing.T
}

// startTestRelay starts a relay with relaytest.Start; it is stopped when
// the test ends.
func startTestRelay(t *testing.T, mutate ...func(*node.Config)) *testRelay {
	t.Helper()
	return &testRelay{Relay: relaytest.Start(t, mutate...), t: t}
}

// startTestRelayLogged starts a relay that logs to log.
func startTestRelayLogged(t *testing.T, log *slog.Logger, mutate ...func(*node.Config)) *testRelay {
	t.Helper()
	return &testRelay{Relay: relaytest.StartLogged(t, log, mutate...), t: t}
}
