package shared_test

import (
	"context"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/cluster/shared"
)

// TestPresenceCountsLiveNodes starts three nodes' presences: each counts
// three; a node that stops is no longer counted, whether it withdrew or
// just stopped renewing.
func TestPresenceCountsLiveNodes(t *testing.T) {
	t.Parallel()
	c := jstest.Start(t, 3)
	popts := shared.PresenceOptions{Every: 50 * time.Millisecond, Timeout: 300 * time.Millisecond}
	var ps []*shared.Presence
	for i, name := range []string{"n1", "n2", "n3"} {
		p, err := shared.StartPresence(context.Background(), c.JetStream(i), name, shared.Options{Replicas: c.Replicas()}, popts)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	defer ps[0].Stop()
	defer ps[1].Stop()
	waitCount := func(p *shared.Presence, want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for p.Count() != want {
			if time.Now().After(deadline) {
				t.Fatalf("Count = %d, want %d", p.Count(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, p := range ps {
		waitCount(p, 3)
	}
	if err := ps[2].Stop(); err != nil {
		t.Fatal(err)
	}
	waitCount(ps[0], 2)
	waitCount(ps[1], 2)
	if _, err := shared.StartPresence(context.Background(), c.JetStream(0), "bad.name", shared.Options{}, popts); err == nil {
		t.Fatal("a node name with a dot was accepted")
	}
}
