package main

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// schedule is the timetable of an open-loop phase: request i is due at
// start + i/rate, whether or not the requests before it have finished. It
// is safe for concurrent use: each request is taken once.
type schedule struct {
	start time.Time
	end   time.Time
	rate  float64
	next  atomic.Int64
}

// newSchedule makes the timetable of rate requests per second from start
// for d.
func newSchedule(start time.Time, d time.Duration, rate float64) *schedule {
	return &schedule{start: start, end: start.Add(d), rate: rate}
}

// due is when request i is due.
func (s *schedule) due(i int64) time.Time {
	// From the request's number rather than by adding up an interval,
	// which would drift by its rounding.
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// take hands out the next request's due time, or false when the phase is
// over: the next request is due at or after its end, or now is past the
// end (requests still waiting then are counted by missed).
func (s *schedule) take(now time.Time) (time.Time, bool) {
	if !now.Before(s.end) {
		return time.Time{}, false
	}
	i := s.next.Add(1) - 1
	due := s.due(i)
	if !due.Before(s.end) {
		// Hand the request back, so that missed does not count it.
		s.next.Add(-1)
		return time.Time{}, false
	}
	return due, true
}

// missed counts the requests due before the end that were never taken:
// every connection was busy until the end.
func (s *schedule) missed() int {
	// The requests due before the end: those numbered below
	// duration×rate.
	total := int64(math.Ceil(s.end.Sub(s.start).Seconds()*s.rate - 1e-9))
	return int(max(0, total-s.next.Load()))
}

// driveOpen runs the mix open-loop at rate requests per second for d: the
// callers (one goroutine each, each with its own connection) take the
// requests in their scheduled order, wait until each is due, and record
// its latency from when it was due, so that a request that waited for a
// free connection counts its wait. A caller never starts a request after
// the phase's end; the requests due meanwhile are reported as missed.
func driveOpen(ctx context.Context, callers []caller, mix []weighted, d time.Duration, rate float64) phaseResult {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	perCaller := make([]map[string]*opResult, len(callers))
	start := time.Now()
	sched := newSchedule(start, d, rate)
	var wg sync.WaitGroup
	for i, c := range callers {
		results := map[string]*opResult{}
		for _, m := range mix {
			results[m.op] = &opResult{}
		}
		perCaller[i] = results
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for seq := i; ctx.Err() == nil; seq += len(callers) {
				due, ok := sched.take(time.Now())
				if !ok {
					return
				}
				if wait := time.Until(due); wait > 0 {
					select {
					case <-time.After(wait):
					case <-ctx.Done():
						return
					}
				}
				op := pick(mix, total, rng)
				err := c.call(ctx, op, seq)
				took := time.Since(due)
				if ctx.Err() != nil {
					return
				}
				r := results[op]
				r.latencies = append(r.latencies, took)
				if err != nil {
					r.errors++
					if r.firstError == "" {
						r.firstError = err.Error()
					}
				}
			}
		})
	}
	wg.Wait()
	// The phase lasts d at least: its last request is due before its end,
	// and its rate is counted over the whole schedule.
	elapsed := max(time.Since(start), d)
	return phaseResult{ops: mergeResults(mix, perCaller), elapsed: elapsed, missed: sched.missed()}
}
