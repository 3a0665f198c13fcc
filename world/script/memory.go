package script

import (
	"runtime/metrics"
	"sync"
	"time"

	"github.com/dop251/goja"
)

// goja has no memory limit of its own, so a short script that keeps what it
// allocates (`for (;;) a.push("x".repeat(1e6))`) could fill the machine's
// memory within its time limit. A watchdog samples the process's live heap
// (as measured by the last garbage collection) while the script runs and
// interrupts the script once the heap has grown by more than the limit
// since the run started. Retaining memory fast makes collections frequent,
// so the check follows a growing heap closely; growth from other requests
// counts too, which errs on the side of stopping a script.

// liveHeapMetric is the heap still reachable at the end of the last
// collection.
const liveHeapMetric = "/gc/heap/live:bytes"

// memoryCheckInterval is how often the watchdog looks at the heap.
const memoryCheckInterval = 10 * time.Millisecond

// memoryError marks a run stopped by the memory watchdog.
type memoryError struct{ limit int64 }

func (e *memoryError) Error() string { return "script memory limit exceeded" }

// liveHeap reads the live heap in bytes.
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: liveHeapMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// watchMemory interrupts vm with a *memoryError once the live heap grows
// by more than limit bytes. The returned function stops the watchdog and
// waits for it, and reports whether it fired.
func watchMemory(vm *goja.Runtime, limit int64) (stop func() (fired bool)) {
	start := liveHeap()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var hit bool
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(memoryCheckInterval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if now := liveHeap(); now > start && int64(now-start) > limit {
					hit = true
					vm.Interrupt(&memoryError{limit: limit})
					return
				}
			}
		}
	}()
	return func() bool {
		close(done)
		wg.Wait()
		return hit
	}
}
