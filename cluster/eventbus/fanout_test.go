package eventbus_test

import (
	"context"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/cluster/internal/jstest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/events"
)

// TestFanOutAcrossThreeNodes measures the delivery time of events to
// subscribers spread over three nodes (the host and two others): from the
// write's return to each subscriber's Next. Scaled down by default; with
// RELAY_CLUSTER_FANOUT=full it runs 1,000 subscribers per node and 200
// writes. It asserts only that every subscriber gets every event, in
// order; the times are logged for docs/operations/cluster.md.
func TestFanOutAcrossThreeNodes(t *testing.T) {
	t.Parallel()
	perNode, writes := 20, 30
	if os.Getenv("RELAY_CLUSTER_FANOUT") == "full" {
		perNode, writes = 1000, 200
	}
	c := jstest.Start(t, 3)
	// The relay's own ring: the dispatchers never fall behind it.
	e, nodes := startNodesRing(t, c, events.DefaultRingSize)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req := world.EventRequest{Channel: world.ChannelActor, ActorUUID: aria}

	var subs []world.EventSubscription
	var where []int
	for i, n := range nodes {
		for range perNode {
			var sub world.EventSubscription
			var err error
			if i == 0 {
				sub, err = n.hub.Subscribe(ctx, e, events.Request{EventRequest: req})
			} else {
				sub, err = n.bus.Subscribe(ctx, demo.ClientID, nil, req)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			subs = append(subs, sub)
			where = append(where, i)
		}
	}
	written := make([]time.Time, writes)
	got := make([][]time.Duration, len(nodes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for i := range writes {
				ev, err := sub.Next(ctx)
				if err != nil {
					t.Errorf("subscriber %d on node %d, event %d: %v", k, where[k]+1, i+1, err)
					return
				}
				if ev.Seq <= last {
					t.Errorf("subscriber %d: event %d after %d", k, ev.Seq, last)
					return
				}
				last = ev.Seq
				mu.Lock()
				d := time.Since(written[i])
				got[where[k]] = append(got[where[k]], d)
				mu.Unlock()
			}
		}()
	}
	for i := range writes {
		mu.Lock()
		written[i] = time.Now()
		mu.Unlock()
		update(t, e, aria, world.Document{"system.attributes.hp.value": i})
		time.Sleep(20 * time.Millisecond) // one write at a time, so each is timed alone
	}
	wg.Wait()
	for i, ds := range got {
		if len(ds) != perNode*writes {
			t.Fatalf("node %d: %d deliveries, want %d", i+1, len(ds), perNode*writes)
		}
		sort.Slice(ds, func(a, b int) bool { return ds[a] < ds[b] })
		t.Logf("node %d (%s), %d subscribers, %d writes: delivery p50 %v, p99 %v, max %v",
			i+1, map[bool]string{true: "host", false: "other"}[i == 0], perNode, writes,
			ds[len(ds)/2].Round(10*time.Microsecond), ds[len(ds)*99/100].Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
	}
}
