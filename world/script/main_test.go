package script_test

import (
	"os"
	"testing"

	"github.com/tabletop-relay/relay/world/script"
)

// TestMain lets the test binary serve as a script worker: a Pool starts
// its workers by running the test binary again.
func TestMain(m *testing.M) {
	script.WorkerMain()
	os.Exit(m.Run())
}
