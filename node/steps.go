package node

import (
	"log/slog"
	"time"
)

// steps times the phases of a node's start or stop, so that its log says
// where the time went when a start or a stop is slow (a cluster node
// waits for NATS and JetStream at start, and releases its leases and
// drains NATS at stop).
type steps struct {
	began, last time.Time
	attrs       []any
}

// newSteps starts timing.
func newSteps() *steps {
	now := time.Now()
	return &steps{began: now, last: now}
}

// done records that the phase called name ended now.
func (s *steps) done(name string) {
	now := time.Now()
	s.attrs = append(s.attrs, slog.Duration(name, now.Sub(s.last).Round(time.Millisecond)))
	s.last = now
}

// group is the phases as one log attribute, with the total.
func (s *steps) group(name string) slog.Attr {
	return slog.Group(name, append([]any{slog.Duration("total", time.Since(s.began).Round(time.Millisecond))}, s.attrs...)...)
}
