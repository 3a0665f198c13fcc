package eventbus

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// recordingSink records what is fed to it.
type recordingSink struct {
	mu  sync.Mutex
	fed []uint64
}

func (s *recordingSink) Feed(_ string, recs []world.JournalRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		s.fed = append(s.fed, r.Seq)
	}
}

func (s *recordingSink) Head(string) uint64 { return 0 }

func (s *recordingSink) SubscribeFed(context.Context, string, *world.User, world.EventRequest) (world.EventSubscription, error) {
	return nil, nil
}

func (s *recordingSink) seqs() []uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.fed)
}

// TestReorder puts events that a retried publication stored out of order
// back in order, and gives up on a missing one after the wait.
func TestReorder(t *testing.T) {
	t.Parallel()
	sink := &recordingSink{}
	r := &reorder{sink: sink, clientID: "w", wait: 50 * time.Millisecond}
	defer r.stop()
	rec := func(seq uint64) world.JournalRecord { return world.JournalRecord{Seq: seq} }

	// The first event is fed whatever its number (the oldest kept).
	for _, seq := range []uint64{5, 6, 8, 9, 7, 7, 10, 4} {
		r.add(rec(seq))
	}
	if got := sink.seqs(); !slices.Equal(got, []uint64{5, 6, 7, 8, 9, 10}) {
		t.Fatalf("fed %v, want 5 to 10 in order, once each", got)
	}
	// 11 never comes: 12 and 13 are fed after the wait.
	r.add(rec(13))
	r.add(rec(12))
	if got := sink.seqs(); len(got) != 6 {
		t.Fatalf("fed %v before the wait", got)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(sink.seqs()) != 8 {
		if time.Now().After(deadline) {
			t.Fatalf("fed %v, want 12 and 13 after the wait", sink.seqs())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := sink.seqs(); !slices.Equal(got[6:], []uint64{12, 13}) {
		t.Fatalf("fed %v after the wait, want 12 and 13", got[6:])
	}
	r.add(rec(11)) // too late: skipped
	r.add(rec(14))
	if got := sink.seqs(); !slices.Equal(got[8:], []uint64{14}) {
		t.Fatalf("fed %v, want 14 only", got[8:])
	}
}
