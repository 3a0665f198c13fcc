package cluster

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fakeBucket is a bucket stream whose last sequence the test moves.
type fakeBucket struct {
	jetstream.Stream
	last atomic.Uint64
}

func (b *fakeBucket) Info(context.Context, ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	return &jetstream.StreamInfo{State: jetstream.StreamState{LastSeq: b.last.Load()}}, nil
}

// TestPacedReaderWaitsForTheBucket checks that an upload hands over at
// most snapshotWindow chunks more than the bucket has stored, and goes on
// as the bucket stores them.
func TestPacedReaderWaitsForTheBucket(t *testing.T) {
	bucket := &fakeBucket{}
	bucket.last.Store(100)
	data := bytes.Repeat([]byte{1}, (snapshotWindow+10)*snapshotChunk)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := &pacedReader{ctx: ctx, r: bytes.NewReader(data), bucket: bucket, base: 100}
	var chunks atomic.Int64
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, snapshotChunk)
		for {
			_, err := p.Read(buf)
			if err != nil {
				done <- err
				return
			}
			chunks.Add(1)
		}
	}()
	// The reader stops at the window while the bucket stores nothing.
	deadline := time.Now().Add(30 * time.Second)
	for chunks.Load() < snapshotWindow && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // room for a reader that would not stop
	if got := chunks.Load(); got != snapshotWindow {
		t.Fatalf("%d chunks handed over with none stored, want %d", got, snapshotWindow)
	}
	// The bucket stores five: five more may go.
	bucket.last.Store(105)
	deadline = time.Now().Add(30 * time.Second)
	for chunks.Load() < snapshotWindow+5 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if got := chunks.Load(); got != snapshotWindow+5 {
		t.Fatalf("%d chunks handed over with 5 stored, want %d", got, snapshotWindow+5)
	}
	bucket.last.Store(100 + snapshotWindow + 10)
	select {
	case err := <-done:
		if err.Error() != "EOF" {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("the upload did not finish once the bucket stored every chunk")
	}
	if got := chunks.Load(); got != snapshotWindow+10 {
		t.Fatalf("%d chunks read, want %d", got, snapshotWindow+10)
	}
}
