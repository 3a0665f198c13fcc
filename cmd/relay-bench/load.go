package main

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// opResult is what one operation did in a measured phase.
type opResult struct {
	latencies  []time.Duration
	errors     int
	firstError string
}

// phaseResult is one phase's results per operation and its real length.
type phaseResult struct {
	ops     map[string]*opResult
	elapsed time.Duration
	// missed counts, in an open-loop phase, the requests due before its
	// end that no connection was free to start.
	missed int
}

// drive runs the mix on every caller (one goroutine each) for d and
// gathers the latencies. Each caller keeps its own results; they are
// merged at the end so recording needs no locks. Callers start no request
// after d but finish the one under way (cancelling it would close its
// keep-alive connection), so the phase lasts a little longer than d and
// its throughput is counted over its real length.
func drive(ctx context.Context, callers []caller, mix []weighted, d time.Duration) phaseResult {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	perCaller := make([]map[string]*opResult, len(callers))
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for i, c := range callers {
		results := map[string]*opResult{}
		for _, m := range mix {
			results[m.op] = &opResult{}
		}
		perCaller[i] = results
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(start.UnixNano())))
			for seq := i; ctx.Err() == nil && time.Now().Before(end); seq++ {
				op := pick(mix, total, rng)
				began := time.Now()
				err := c.call(ctx, op, seq)
				took := time.Since(began)
				if ctx.Err() != nil {
					// Interrupted (Ctrl-C): neither a result nor an error.
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
	return phaseResult{ops: mergeResults(mix, perCaller), elapsed: time.Since(start)}
}

// mergeResults gathers the callers' results per operation, with sorted
// latencies.
func mergeResults(mix []weighted, perCaller []map[string]*opResult) map[string]*opResult {
	ops := map[string]*opResult{}
	for _, m := range mix {
		merged := &opResult{}
		for _, results := range perCaller {
			r := results[m.op]
			merged.latencies = append(merged.latencies, r.latencies...)
			merged.errors += r.errors
			if merged.firstError == "" {
				merged.firstError = r.firstError
			}
		}
		slices.Sort(merged.latencies)
		ops[m.op] = merged
	}
	return ops
}

// pick chooses an operation of the mix by weight.
func pick(mix []weighted, total int, rng *rand.Rand) string {
	if len(mix) == 1 {
		return mix[0].op
	}
	n := rng.IntN(total)
	for _, m := range mix {
		if n < m.weight {
			return m.op
		}
		n -= m.weight
	}
	return mix[len(mix)-1].op
}

// percentile is the q-quantile (0..1) of sorted latencies, by the
// nearest-rank method.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}
