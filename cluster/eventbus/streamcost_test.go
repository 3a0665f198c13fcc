package eventbus_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
)

// TestStreamCost measures, on three in-process NATS servers, what a
// JetStream stream per world would cost (the time to create one, the
// memory and goroutines each adds to the servers) against a purge of one
// world's subject in the shared events stream, the request the byte
// budget sends. It weighs the design choice documented in
// docs/operations/cluster.md and runs only with RELAY_EVENTS_STREAMCOST
// set to the number of streams to create.
func TestStreamCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RELAY_EVENTS_STREAMCOST"))
	if n <= 0 {
		t.Skip("set RELAY_EVENTS_STREAMCOST=<streams> to measure")
	}
	c := jstest.Start(t, 3)
	js := c.JetStream(0)
	ctx := context.Background()
	settle := func() (heap uint64, goroutines int) {
		time.Sleep(2 * time.Second)
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse, runtime.NumGoroutine()
	}
	heap0, g0 := settle()
	began := time.Now()
	var slowest time.Duration
	for i := range n {
		t0 := time.Now()
		_, err := js.CreateStream(ctx, jetstream.StreamConfig{
			Name:       fmt.Sprintf("RELAY_EVENTS_w%05d", i),
			Subjects:   []string{fmt.Sprintf("cost.events.w%05d", i)},
			MaxMsgs:    10000,
			MaxBytes:   64 << 20,
			Discard:    jetstream.DiscardOld,
			Storage:    jetstream.FileStorage,
			Replicas:   3,
			Duplicates: 2 * time.Minute,
		})
		if err != nil {
			t.Fatal(err)
		}
		slowest = max(slowest, time.Since(t0))
	}
	took := time.Since(began)
	heap1, g1 := settle()
	t.Logf("%d R3 file streams: %.1f ms each on average, slowest %.0f ms; %.0f KiB of heap and %.1f goroutines per stream over the three servers",
		n, float64(took.Milliseconds())/float64(n), float64(slowest.Milliseconds()), float64(int64(heap1)-int64(heap0))/1024/float64(n), float64(g1-g0)/float64(n))

	// The shared stream's alternative: one purge of a world's subject.
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "COST_SHARED", Subjects: []string{"cost.shared.*"}, MaxMsgsPerSubject: 10000, Storage: jetstream.FileStorage, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	const purges = 200
	began = time.Now()
	for i := range purges {
		ack, err := js.Publish(ctx, "cost.shared.a", make([]byte, 1024))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject("cost.shared.a"), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
			t.Fatal(err, i)
		}
	}
	t.Logf("publish and purge of one subject: %.2f ms a pair", float64(time.Since(began).Microseconds())/1000/purges)
}
