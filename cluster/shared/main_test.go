package shared_test

import (
	"os"
	"testing"

	"github.com/tabletop-relay/relay/internal/racesuppress"
)

// TestMain runs the tests with the suppression of a known race inside
// nats-server when the race detector is on (see racesuppress).
func TestMain(m *testing.M) {
	racesuppress.Apply()
	os.Exit(m.Run())
}
