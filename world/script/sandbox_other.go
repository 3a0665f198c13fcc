//go:build !linux

package script

import (
	"errors"
	"os"
	"os/exec"
)

// workerCommand returns the command that starts a worker: the running
// binary itself.
func workerCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe)
	cmd.Args = []string{"relay-script-worker"}
	return cmd
}

// limitWorker refuses to run: the memory ceiling relies on Linux's
// RLIMIT_DATA, which other systems do not enforce on memory mappings, and
// a worker without its ceiling would break the promise of the limits.
func limitWorker(budget int64) error {
	return errors.New("script workers need Linux: the memory ceiling relies on its RLIMIT_DATA")
}

// residentPeak is not measured outside Linux.
func residentPeak(int) int64 { return 0 }
