package link_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/world"
)

// bigHook is an updateActor hook event whose actor carries a biography
// of size bytes.
func bigHook(i, size int) link.Event {
	id := fmt.Sprintf("actor%011d", i)
	msg, _ := json.Marshal(map[string]any{"type": "hook-event", "data": map[string]any{"hook": "updateActor", "args": []any{
		map[string]any{"_id": id, "name": "Actor", "ownership": map[string]any{"default": 2}},
		map[string]any{"_id": id, "system": map[string]any{"bio": strings.Repeat("b", size)}}, map[string]any{}}}})
	return link.Event{Type: "hook-event", Message: msg}
}

// deepHook is an updateActor hook event whose change nests depth levels.
func deepHook(depth int) link.Event {
	change := strings.Repeat(`{"a":`, depth) + `1` + strings.Repeat(`}`, depth)
	msg := []byte(`{"type":"hook-event","data":{"hook":"updateActor","args":[{"_id":"deep00000000000","name":"Deep","ownership":{"default":2}},{"_id":"deep00000000000","system":` + change + `},{}]}}`)
	return link.Event{Type: "hook-event", Message: msg}
}

func linkedSubscribe(t *testing.T, evs *link.Events, clientID string, resume bool, after uint64) world.EventSubscription {
	t.Helper()
	w := link.NewLinked(nil, clientID, world.Info{}).WithEvents(evs)
	s, err := w.Subscribe(context.Background(), nil, world.EventRequest{Channel: world.ChannelHooks, Resume: resume, After: after})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// A linked world's retained events stay within the byte budget, in memory
// and in the journal (relay.db), the oldest leaving first; a resume from
// before them is a reset, before and after a restart.
func TestLinkedEventsKeepWithinTheByteBudget(t *testing.T) {
	t.Parallel()
	const budget = 256 << 10
	const size = 32 << 10
	store, err := link.OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	const clientID = "fvtt_budget000000001"
	limits := link.EventLimits{RingBytes: budget, InboxBytes: 64 << 10}
	first := link.NewEvents()
	first.SetJournal(store)
	first.SetLimits(limits)
	for i := range 60 {
		first.Publish(clientID, bigHook(i, size))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := first.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if head := first.Head(clientID); head != 60 {
		t.Fatalf("head %d after 60 events", head)
	}
	check := func(evs *link.Events, when string) uint64 {
		t.Helper()
		s := linkedSubscribe(t, evs, clientID, true, 0)
		r, reset := s.Reset()
		if !reset || r.Oldest <= 1 || r.Head != 60 {
			t.Fatalf("%s: resume from the start: reset %v %+v, want a reset past the first event", when, reset, r)
		}
		kept := linkedSubscribe(t, evs, clientID, true, r.Oldest-1)
		replayed := 0
		for _, ev := range kept.Replay() {
			replayed += len(ev.Data)
		}
		if _, reset := kept.Reset(); reset || len(kept.Replay()) == 0 || replayed > budget {
			t.Fatalf("%s: resume from the oldest kept: reset %v, %d events of %d bytes, want them within %d", when, reset, len(kept.Replay()), replayed, budget)
		}
		return r.Oldest
	}
	oldest := check(first, "before a restart")
	stored, err := store.LoadEvents(ctx, clientID)
	if err != nil {
		t.Fatal(err)
	}
	onDisk := 0
	for _, je := range stored {
		onDisk += len(je.Data)
	}
	// The journal forgets after each batch: it may hold one batch (at
	// most the inbox's bytes) more than the ring.
	if max := budget + 2*int(limits.InboxBytes); onDisk > max {
		t.Fatalf("the journal holds %d events of %d bytes, want at most %d bytes", len(stored), onDisk, max)
	}

	second := link.NewEvents()
	second.SetJournal(store)
	second.SetLimits(limits)
	if again := check(second, "after a restart"); again < oldest {
		t.Fatalf("after a restart the oldest event kept is %d, before it %d", again, oldest)
	}
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Event messages larger than MaxEventBytes, or nested deeper than the
// documents' depth limit allows, are dropped, counted, and logged once per
// world; the others go through.
func TestOversizedLinkedEventsAreDropped(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	evs := link.NewEvents()
	evs.SetLimits(link.EventLimits{MaxEventBytes: 8 << 10, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	const clientID = "fvtt_oversized00001"
	sub := linkedSubscribe(t, evs, clientID, false, 0)
	for i := range 3 {
		evs.Publish(clientID, bigHook(i, 20<<10))
	}
	evs.Publish(clientID, deepHook(200))
	evs.Publish(clientID, bigHook(9, 1<<10))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Seq != 1 || !bytes.Contains(ev.Data, []byte("actor00000000009")) {
		t.Fatalf("first event delivered: %d %.100s, want the small one as event 1", ev.Seq, ev.Data)
	}
	if got := evs.Stats().Oversized; got != 4 {
		t.Fatalf("counted %d oversized events, want 4", got)
	}
	if n := strings.Count(logs.String(), "dropped an event message"); n != 1 {
		t.Fatalf("logged %d notices for one world, want 1:\n%s", n, logs.String())
	}
	// Another world gets its own notice.
	evs.Publish("fvtt_oversized00002", bigHook(0, 20<<10))
	if n := strings.Count(logs.String(), "dropped an event message"); n != 2 {
		t.Fatalf("logged %d notices for two worlds, want 2", n)
	}
}

// gatedJournal is an event journal whose writes wait for open.
type gatedJournal struct {
	open chan struct{}
}

func (g gatedJournal) AppendEvents(ctx context.Context, _ string, _ []link.JournalEvent, _ uint64) error {
	select {
	case <-g.open:
	case <-ctx.Done():
	}
	return nil
}

func (gatedJournal) LoadEvents(context.Context, string) ([]link.JournalEvent, error) { return nil, nil }

// While a world's messages wait to be processed up to InboxBytes, Publish
// (the socket's reader) waits for them rather than queueing more or
// dropping them; every message then goes through, in order.
func TestLinkedEventsHoldTheSocketReaderBack(t *testing.T) {
	t.Parallel()
	gate := gatedJournal{open: make(chan struct{})}
	evs := link.NewEvents()
	evs.SetJournal(gate)
	evs.SetLimits(link.EventLimits{InboxBytes: 32 << 10})
	const clientID = "fvtt_backpressure001"
	sub := linkedSubscribe(t, evs, clientID, false, 0)
	const n = 20
	var published atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range n {
			evs.Publish(clientID, bigHook(i, 10<<10))
			published.Add(1)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	if got := published.Load(); got >= n {
		t.Fatalf("all %d messages were taken while the world's goroutine was held up: no back-pressure", got)
	}
	close(gate.open)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("Publish still held after the journal opened: %d of %d taken", published.Load(), n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range n {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("event %d: %v", i+1, err)
		}
		if ev.Seq != uint64(i+1) {
			t.Fatalf("event %d came as %d", i+1, ev.Seq)
		}
	}
	if s := evs.Stats(); s.Dropped != 0 {
		t.Fatalf("dropped %d messages, want none", s.Dropped)
	}
}

// A reply larger than MaxReplyBytes, or nested deeper than the documents'
// depth limit allows, fails its request with a clear error (the world's
// Unavailable, 503) and leaves the connection up, whether the reader kept
// it (under MaxEventBytes too) or read it into nothing (over both); an
// event message over MaxEventBytes is handed on without its content.
func TestRepliesOverTheLimitsFailTheirRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *link.Config) { c.Hub.MaxReplyBytes, c.Hub.MaxEventBytes = 64<<10, 80<<10 })
	tt := e.connected(func(c *linktest.Config) {
		c.Handler = linktest.ByType(map[string]linktest.Handler{
			"entity": func(_ context.Context, req linktest.Request) (any, bool) {
				var p struct {
					UUID string `json:"uuid"`
				}
				_ = req.Params(&p)
				switch p.UUID {
				case "Actor.big":
					return map[string]any{"data": map[string]any{"_id": "big", "bio": strings.Repeat("x", 100<<10)}}, true
				case "Actor.mid":
					return map[string]any{"data": map[string]any{"_id": "mid", "bio": strings.Repeat("x", 70<<10)}}, true
				case "Actor.deep":
					return map[string]any{"data": json.RawMessage(strings.Repeat(`{"a":`, 500) + `1` + strings.Repeat(`}`, 500))}, true
				}
				return map[string]any{"data": map[string]any{"_id": "small", "name": "Small"}}, true
			},
		})
	})
	clientID, _ := tt.Credentials()
	w := link.NewLinked(e.svc.Hub(), clientID, world.Info{})
	ctx := context.Background()
	for _, uuid := range []string{"Actor.big", "Actor.mid", "Actor.deep"} {
		_, err := w.Get(ctx, nil, uuid)
		var werr *world.Error
		if !errors.Is(err, link.ErrReplyRefused) || !errors.As(err, &werr) || werr.Kind != world.ErrUnavailable {
			t.Fatalf("get %s: %v, want the reply refused as unavailable", uuid, err)
		}
		if !strings.Contains(err.Error(), "refuses") {
			t.Fatalf("get %s: unclear error %q", uuid, err)
		}
	}
	if !tt.Connected() {
		t.Fatal("a refused reply closed the connection")
	}
	doc, err := w.Get(ctx, nil, "Actor.small")
	if err != nil || doc["name"] != "Small" {
		t.Fatalf("get after the refusals: %v %v", doc, err)
	}
	if s := e.svc.Hub().Stats(); s.RefusedReplies != 3 {
		t.Fatalf("counted %d refused replies, want 3", s.RefusedReplies)
	}
	if err := tt.Emit("hook-event", map[string]any{"hook": "updateActor", "args": []any{strings.Repeat("y", 200<<10)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-e.events:
		if ev.Type != "hook-event" || ev.Message != nil || ev.Size < 200<<10 {
			t.Fatalf("event over MaxEventBytes handed on as %s of %d bytes kept, size %d", ev.Type, len(ev.Message), ev.Size)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the event over MaxEventBytes was not handed on")
	}
	if !tt.Connected() {
		t.Fatal("an event over the limit closed the connection")
	}
}
