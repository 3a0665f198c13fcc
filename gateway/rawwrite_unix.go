//go:build unix

package gateway

import (
	"errors"
	"syscall"
)

// rawWriteSupported reports whether event streams may be written straight
// to their connection's descriptor (see writeNonBlocking).
const rawWriteSupported = true

// writeNonBlocking writes as much of p as the connection's socket buffer
// takes at once, without waiting for room, and returns how much that was.
// A full buffer is no error: the count is short. Go keeps its network
// descriptors in non-blocking mode, so the system call returns at once.
func writeNonBlocking(rc syscall.RawConn, p []byte) (int, error) {
	var (
		n    int
		werr error
	)
	// Control rather than Write: Write would first check the write
	// deadline, which the write-stall guard keeps for the writes that may
	// block and pushes forward only as those progress; a write that never
	// blocks has nothing to guard against. The stream's writes take turns
	// (sseWriter), so none runs alongside.
	err := rc.Control(func(fd uintptr) {
	writing:
		for n < len(p) {
			m, e := syscall.Write(int(fd), p[n:])
			if m > 0 {
				n += m
			}
			switch {
			case e == nil && m > 0:
				continue
			case errors.Is(e, syscall.EINTR):
				continue
			case errors.Is(e, syscall.EAGAIN):
			case e != nil:
				werr = e
			default:
				werr = errors.New("the connection took no bytes")
			}
			break writing
		}
	})
	if err != nil {
		return n, err
	}
	return n, werr
}
