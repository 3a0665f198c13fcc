//go:build !unix

package gateway

import (
	"errors"
	"syscall"
)

// rawWriteSupported reports whether event streams may be written straight
// to their connection's descriptor: not on this system, where every
// stream writes through net/http in its own goroutine.
const rawWriteSupported = false

type rawWriter struct{}

func newRawWriter(syscall.RawConn) *rawWriter { return &rawWriter{} }

func (*rawWriter) write([]byte) (int, error) { return 0, errors.ErrUnsupported }

func (*rawWriter) control(func(fd int)) error { return errors.ErrUnsupported }
