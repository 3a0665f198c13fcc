package server

import (
	"context"
	"sync/atomic"
	"time"
)

// A gRPC caller on the network could send a request message's first bytes
// and then trickle the rest, holding a stream (and its goroutine) for as
// long as it likes: grpc-go's own transport bounds neither how long a
// message may take nor how slowly it may come (the HTTP server's body
// guard, netlimit.BodyGuard, only sees gRPC calls that reach it). The
// network server therefore gives every message it reads an allowance:
// RecvTimeout, plus the time the largest message allowed takes at
// RecvMinRate. A message not in whole by then ends its call (the stream's
// context ends as if its deadline had passed, which grpc-go answers
// DEADLINE_EXCEEDED), as a REST body that falls behind is cut off.
//
// The tap (admitTap) puts a recvGuard in each network call's context,
// which then becomes the stream's, so that cancelling it stops the
// message's read; the decoding steps (decode.go) arm it around each read.

// recvGuard bounds the reads of one call's messages.
type recvGuard struct {
	cancel    context.CancelFunc
	allowance time.Duration
	fired     atomic.Bool
}

// guardedContext is a call's context under a recvGuard: once the guard
// fired, its error is DeadlineExceeded (for it and the contexts made from
// it), which is what happened: the message's time ran out.
type guardedContext struct {
	context.Context
	guard *recvGuard
}

func (c guardedContext) Err() error {
	err := c.Context.Err()
	if err != nil && c.guard.fired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

func (c guardedContext) Value(key any) any {
	if key == (recvGuardKey{}) {
		return c.guard
	}
	return c.Context.Value(key)
}

type recvGuardKey struct{}

// recvAllowance is how long one message may take to arrive whole, or 0
// for no bound.
func recvAllowance(timeout time.Duration, minRate, maxMessageBytes int) time.Duration {
	if timeout <= 0 {
		return 0
	}
	if minRate > 0 {
		timeout += time.Duration(maxMessageBytes) * time.Second / time.Duration(minRate)
	}
	return timeout
}

// withRecvGuard returns a call's context with a guard for its reads, when
// reads are bounded.
func withRecvGuard(ctx context.Context, allowance time.Duration) context.Context {
	if allowance <= 0 {
		return ctx
	}
	ctx, cancel := context.WithCancel(ctx)
	return guardedContext{Context: ctx, guard: &recvGuard{cancel: cancel, allowance: allowance}}
}

// guardRecv runs read, cancelling the call when it takes longer than the
// call's allowance.
func guardRecv(ctx context.Context, read func() error) error {
	g, _ := ctx.Value(recvGuardKey{}).(*recvGuard)
	if g == nil {
		return read()
	}
	timer := time.AfterFunc(g.allowance, func() {
		g.fired.Store(true)
		g.cancel()
	})
	err := read()
	timer.Stop()
	return err
}
