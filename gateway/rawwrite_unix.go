//go:build unix

package gateway

import (
	"errors"
	"syscall"
)

// rawWriteSupported reports whether event streams may be written straight
// to their connection's descriptor (see writeNonBlocking).
const rawWriteSupported = true

// rawWriter writes to a connection's descriptor without blocking (see
// write). One is kept per stream, so that a write allocates nothing.
type rawWriter struct {
	rc syscall.RawConn
	// fn is write's callback, made once; p, n and err are its argument
	// and results.
	fn  func(fd uintptr)
	p   []byte
	n   int
	err error
}

func newRawWriter(rc syscall.RawConn) *rawWriter {
	w := &rawWriter{rc: rc}
	w.fn = w.writeFD
	return w
}

// write writes as much of p as the connection's socket buffer takes at
// once, without waiting for room, and returns how much that was. A full
// buffer is no error: the count is short. Go keeps its network
// descriptors in non-blocking mode, so the system call returns at once.
// Calls must not overlap.
func (w *rawWriter) write(p []byte) (int, error) {
	w.p, w.n, w.err = p, 0, nil
	// Control rather than Write: Write would first check the write
	// deadline, which the write-stall guard keeps for the writes that may
	// block and pushes forward only as those progress; a write that never
	// blocks has nothing to guard against. The stream's writes take turns
	// (sseWriter), so none runs alongside.
	err := w.rc.Control(w.fn)
	n, werr := w.n, w.err
	w.p = nil
	if err != nil {
		return n, err
	}
	return n, werr
}

func (w *rawWriter) writeFD(fd uintptr) {
	for w.n < len(w.p) {
		m, e := syscall.Write(int(fd), w.p[w.n:])
		if m > 0 {
			w.n += m
		}
		switch {
		case e == nil && m > 0:
			continue
		case errors.Is(e, syscall.EINTR):
			continue
		case errors.Is(e, syscall.EAGAIN):
		case e != nil:
			w.err = e
		default:
			w.err = errors.New("the connection took no bytes")
		}
		return
	}
}

// control runs f with the connection's descriptor, which stays open
// meanwhile.
func (w *rawWriter) control(f func(fd int)) error {
	return w.rc.Control(func(fd uintptr) { f(int(fd)) })
}
