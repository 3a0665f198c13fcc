//go:build !linux

package gateway

import "errors"

// pollerSupported reports whether event streams may be detached from their
// handler's goroutine: not on this system, where each stream keeps its
// goroutine.
const pollerSupported = false

type poller struct{}

func streamPoller() (*poller, error) { return nil, errors.ErrUnsupported }

func (*poller) add(int, *sseWriter) (uint64, error) { return 0, errors.ErrUnsupported }
func (*poller) watchWrites(int, uint64, bool) error { return errors.ErrUnsupported }
func (*poller) remove(int, uint64)                  {}
func readFD(int, []byte) (int, error)               { return 0, errors.ErrUnsupported }
