package eventbus

import (
	"log/slog"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// Events waiting for publication are bounded in bytes as well as in
// number: past PublishQueueBytes they are dropped and counted (the other
// nodes' subscribers then get the reset event), however few they are.
func TestPublishQueueIsBoundedInBytes(t *testing.T) {
	b := &Bus{opts: Options{PublishQueueBytes: 1 << 20, Log: slog.New(slog.DiscardHandler)}, queue: make(chan outgoing, 100)}
	record := func(seq uint64) world.JournalRecord {
		return world.JournalRecord{Seq: seq, Data: make([]byte, 400<<10)}
	}
	for seq := range uint64(5) {
		b.enqueue(subjectPrefix, "west", []world.JournalRecord{record(seq + 1)})
	}
	if len(b.queue) != 2 || b.Dropped() != 3 {
		t.Fatalf("queued %d events of 400 KiB and dropped %d under a 1 MiB bound, want 2 and 3", len(b.queue), b.Dropped())
	}
	// Once the queue is taken, events are queued again.
	for range 2 {
		o := <-b.queue
		b.queued.Add(-int64(len(o.record.Data)))
	}
	b.enqueue(subjectPrefix, "west", []world.JournalRecord{record(6)})
	if len(b.queue) != 1 {
		t.Fatalf("after the queue emptied, queued %d, want 1", len(b.queue))
	}
}
