package eventbus

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
)

// TestStoredSizeIsWhatJetStreamCounts publishes event messages of several
// sizes and sequence numbers to a file-stored stream: storedSize gives
// exactly the bytes the stream's state grows by.
func TestStoredSizeIsWhatJetStreamCounts(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	js := c.JetStream(0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SIZES", Subjects: []string{subjectPrefix + "*"}, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, ev := range []struct {
		clientID string
		seq      uint64
		size     int
	}{{"w", 1, 0}, {"west", 9, 10}, {"a-much-longer_world-id", 123456789, 100_000}} {
		subject := subjectPrefix + ev.clientID
		if _, err := js.PublishMsg(ctx, eventMsg(subject, world.JournalRecord{Seq: ev.seq, Data: make([]byte, ev.size)})); err != nil {
			t.Fatal(err)
		}
		want += storedSize(subject, ev.seq, ev.size)
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if int64(info.State.Bytes) != want {
			t.Fatalf("after event %d of %s: the stream holds %d bytes, storedSize counts %d", ev.seq, ev.clientID, info.State.Bytes, want)
		}
	}
}

// TestWindowKeepsStreamOrder: a window holds each event once, in stream
// order whatever the order its acknowledgements came in, and forgets the
// oldest past the ring's size.
func TestWindowKeepsStreamOrder(t *testing.T) {
	var w window
	for _, seq := range []uint64{1, 2, 5, 3, 5, 4} {
		w.add(keptEvent{stream: seq, size: int64(seq)}, 4)
	}
	var got []uint64
	for _, e := range w.kept {
		got = append(got, e.stream)
	}
	if len(got) != 4 || got[0] != 2 || got[1] != 3 || got[2] != 4 || got[3] != 5 || w.bytes != 2+3+4+5 {
		t.Fatalf("window %v with %d bytes, want 2 3 4 5 with 14", got, w.bytes)
	}
}
