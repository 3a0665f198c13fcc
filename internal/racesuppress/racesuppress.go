// Package racesuppress lets test binaries run under the race detector with
// the suppression of one known data race inside nats-server, and nothing
// else suppressed.
//
// nats-server v2.15.2 (the newest release) checks a stream's map of
// in-flight subjects without its lock each time it applies a message
// (applyStreamMsgOp, "technically ... could cause datarace" in its own
// comment), while the first publish after a stream leader changes creates
// the map under the lock (batchStagedDiff.commit in jetstream_batching.go).
// Every clustered publish takes that path, batched or not. When a leader
// changes while messages of the previous term are being applied, as on a
// loaded machine, the detector reports it and fails whichever test was
// running. The race is the server's, harmless (a nil check of a map whose
// entries are read under the lock), and nothing the relay does can avoid
// it, so its tests suppress it, and only it.
package racesuppress

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// suppressions is the race detector's suppression file: a report is
// dropped when a frame of either access matches a line.
const suppressions = `# nats-server v2.15.2: unlocked nil check of stream.inflight.
race:nats-server/v2/server.(*jetStream).applyStreamMsgOp
`

// marker tells a re-executed binary that it already runs with the
// suppressions.
const marker = "RELAY_RACE_SUPPRESSIONS"

// Apply re-executes the test binary with GORACE naming the suppression
// file, when it runs under the race detector without it; otherwise it
// returns at once. Call it first in TestMain: the detector reads GORACE
// only when the process starts.
func Apply() {
	if !raceEnabled || os.Getenv(marker) != "" || strings.Contains(os.Getenv("GORACE"), "suppressions=") {
		return
	}
	// Test binaries of several packages start at once: each writes a file
	// of its own and renames it into place, so none reads a half-written
	// one.
	file := filepath.Join(os.TempDir(), "relay-race-suppressions.txt")
	tmp, err := os.CreateTemp(os.TempDir(), "relay-race-suppressions-*")
	if err != nil {
		return // run on, without suppressions
	}
	_, err = tmp.WriteString(suppressions)
	_ = tmp.Chmod(0o644)
	if cerr := tmp.Close(); err != nil || cerr != nil || os.Rename(tmp.Name(), file) != nil {
		_ = os.Remove(tmp.Name())
		return
	}
	env := append(os.Environ(), marker+"=1", "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" suppressions="+file))
	exe, err := os.Executable()
	if err != nil {
		return
	}
	// Exec replaces the process: its output, exit code and signals stay
	// the test binary's, as go test expects.
	_ = syscall.Exec(exe, os.Args, env)
}
