package world_test

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// The benchmarks of the world's hot paths: what GET /get and PUT /update
// cost in the engine, without HTTP or gRPC. Each reports the process's CPU
// time per operation (cpu-µs/op) besides the wall time, since a write's
// wall time is mostly its wait for fsync, shared by the writers of a
// group commit:
//
//	go test -run '^$' -bench 'GetJSON|UpdateJSON' -benchmem ./world/

const (
	benchWizard = "Actor.ariaVale00000001" // the demo's largest actor, 33 KB
	benchGuard  = "Actor.townGuard0000001" // LIMITED to Alice
)

// benchDemo opens a demo world in a temporary directory.
func benchDemo(b *testing.B) *world.Engine {
	return benchDemoWith(b, world.Options{})
}

// benchDemoWith opens a demo world with options in a temporary directory.
func benchDemoWith(b *testing.B, opts world.Options) *world.Engine {
	b.Helper()
	ctx := context.Background()
	host, err := world.OpenHost(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		b.Fatal(err)
	}
	w, err := host.Create(ctx, "demo", seed)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the CPU time spent since start per operation.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkGetJSONFull is a player's read of her own 33 KB character: the
// full readers' JSON, from the cache.
func BenchmarkGetJSONFull(b *testing.B) {
	w := benchDemo(b)
	ctx := context.Background()
	alice, err := w.ResolveUser(ctx, "Alice")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, err := w.GetJSON(ctx, alice, benchWizard); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkGetJSONLimited is a player's read of an actor she sees at the
// LIMITED level: its four keys, from the cache.
func BenchmarkGetJSONLimited(b *testing.B) {
	w := benchDemo(b)
	ctx := context.Background()
	alice, err := w.ResolveUser(ctx, "Alice")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, err := w.GetJSON(ctx, alice, benchGuard); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkUpdateJSON is PUT /update's work in the engine on the demo's
// largest actor: a changed hit point value each time, committed durably
// (synchronous=FULL) by 16 writers at once, so that group commit shares
// the fsyncs as it does under load; with the relay's commit delay and
// without one. It reports the transactions per group commit too.
func BenchmarkUpdateJSON(b *testing.B) {
	for _, delay := range []time.Duration{0, world.DefaultCommitDelay} {
		b.Run("commit-delay="+delay.String(), func(b *testing.B) { benchUpdateJSON(b, delay) })
	}
}

func benchUpdateJSON(b *testing.B, delay time.Duration) {
	var commits, txs atomic.Int64
	w := benchDemoWith(b, world.Options{CommitDelay: delay, ObserveCommit: func(_ time.Duration, n int) {
		commits.Add(1)
		txs.Add(int64(n))
	}})
	ctx := context.Background()
	commits.Store(0)
	txs.Store(0)
	var n atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	start := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			hp := float64(1 + n.Add(1)%40)
			if _, err := w.UpdateJSON(ctx, nil, benchWizard, world.Document{"system.attributes.hp.value": hp}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportCPU(b, start)
	if n := commits.Load(); n > 0 {
		b.ReportMetric(float64(txs.Load())/float64(n), "tx/commit")
	}
}
