//go:build unix

package netlimit

import "syscall"

// openFileLimit returns the process's limit on open files (the soft limit,
// which Go raises to the hard one at start-up), or 0 when it is unknown.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return uint64(lim.Cur)
}
