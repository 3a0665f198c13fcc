package eventbus

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// TestBackfillFillsHoles: a host killed while a publication was being
// retried can leave the events stream with a later event of a world and
// without an earlier one. Backfill publishes from the journal what the
// stream lacks, after its last event and below it.
func TestBackfillFillsHoles(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 1)
	ctx := context.Background()
	hub := events.New(events.Options{RingSize: 16})
	b, err := New(ctx, c.JetStream(0), hub, Options{Replicas: 1, RingSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); hub.Close() })
	const world1 = "holes"
	subject := subjectPrefix + world1
	journal := make([]world.JournalRecord, 6)
	for i := range journal {
		journal[i] = world.JournalRecord{Seq: uint64(i + 1), Data: []byte(`{"n":` + strconv.Itoa(i+1) + `}`)}
	}
	// The stream got 1, 2 and 4 of the six the journal holds.
	for _, i := range []int{0, 1, 3} {
		if _, err := c.JetStream(0).PublishMsg(ctx, eventMsg(subject, journal[i])); err != nil {
			t.Fatal(err)
		}
	}
	read := func(_ context.Context, from uint64, fn func(world.JournalRecord) error) error {
		for _, r := range journal {
			if r.Seq >= from {
				if err := fn(r); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if _, err := b.Backfill(ctx, world1, read); err != nil {
		t.Fatal(err)
	}
	stream, err := c.JetStream(0).Stream(ctx, StreamName)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for seq := uint64(1); ; {
		msg, err := stream.GetMsg(ctx, seq, jetstreamNextBySubject(subject))
		if err != nil {
			break
		}
		n, _ := strconv.ParseUint(msg.Header.Get(seqHeader), 10, 64)
		got = append(got, n)
		seq = msg.Sequence + 1
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint64{1, 2, 3, 4, 5, 6}) {
		t.Fatalf("the stream keeps %v, want 1 to 6 once each", got)
	}
}

func jetstreamNextBySubject(subject string) jetstream.GetMsgOpt {
	return jetstream.WithGetMsgSubject(subject)
}
