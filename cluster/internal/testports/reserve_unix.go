//go:build unix

package testports

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// reservePort takes port for this process with an exclusive lock on a file
// of dir named after it, and reports whether it could; release gives it
// back. The kernel drops the lock when the process ends, however it ends,
// so a crashed run never keeps a port from the next.
func reservePort(dir string, port int) (release func(), ok bool) {
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, false
	}
	return func() { f.Close() }, true
}
