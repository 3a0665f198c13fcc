package link

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
)

func TestTooDeep(t *testing.T) {
	for _, c := range []struct {
		json  string
		limit int
		deep  bool
	}{
		{`{"a":[1,2,{"b":3}]}`, 3, false},
		{`{"a":[1,2,{"b":3}]}`, 2, true},
		{`{"a":"[[[[[[[[[["}`, 1, false},
		{`{"a":"\"[[[[[[[[["}`, 1, false},
		{`[[],[],[],[]]`, 2, false},
		{strings.Repeat("[", 9990) + strings.Repeat("]", 9990), 68, true},
	} {
		if got := tooDeep([]byte(c.json), c.limit); got != c.deep {
			t.Errorf("tooDeep(%.40s, %d) = %v, want %v", c.json, c.limit, got, c.deep)
		}
	}
}

// The reply budget makes a holder wait while others hold the rest, lets a
// lone holder take more than the whole, and lets every waiter go once
// closed.
func TestByteBudget(t *testing.T) {
	var b byteBudget
	b.init(10)
	first := b.acquire(6)
	got := make(chan *budgetHold)
	go func() { got <- b.acquire(6) }()
	select {
	case <-got:
		t.Fatal("took 6 of 10 while 6 were held")
	case <-time.After(50 * time.Millisecond):
	}
	first.release()
	first.release() // a second release gives nothing back twice
	second := <-got
	if b.held != 6 {
		t.Fatalf("held %d, want 6", b.held)
	}
	second.release()
	huge := b.acquire(100) // alone: more than the whole budget
	go func() { got <- b.acquire(1) }()
	select {
	case <-got:
		t.Fatal("took 1 while more than the budget was held")
	case <-time.After(50 * time.Millisecond):
	}
	b.close()
	<-got
	huge.release()
}

func TestHeadScanner(t *testing.T) {
	for _, c := range []struct{ msg, typ, id string }{
		{`{"type":"hook-event","requestId":"r1","data":{"type":"inner","requestId":"x"}}`, "hook-event", "r1"},
		{`{"data":{"type":"inner","requestId":"x"},"list":["type","requestId"],"requestId":"entity_7","type":"entity-result"}`, "entity-result", "entity_7"},
		{`{"data":"` + strings.Repeat(`\"`, 1000) + `","type":"hook-event"}`, "hook-event", ""},
		{`{"type":"a\"b"}`, "", ""},
		{`{"type":"` + strings.Repeat("t", 300) + `","requestId":"ok"}`, "", "ok"},
	} {
		var h headScanner
		// Fed in small pieces, as a socket gives them.
		for b := range strings.SplitSeq(c.msg, "") {
			_, _ = h.Write([]byte(b))
		}
		if h.typ != c.typ || h.id != c.id {
			t.Errorf("%.60s: type %q id %q, want %q %q", c.msg, h.typ, h.id, c.typ, c.id)
		}
	}
}

// The combatants remembered of one combat stay bounded however many a
// tabletop names.
func TestCombatantsRememberedAreBounded(t *testing.T) {
	var w worldEvents
	for i := range 3 * maxCombatants {
		w.noteCombatant("combat1", map[string]any{"_id": strconv.Itoa(i), "name": "Goblin"})
	}
	if n := len(w.combatants["combat1"]); n == 0 || n > maxCombatants {
		t.Fatalf("remembered %d combatants of one combat, want 1 to %d", n, maxCombatants)
	}
}

// A world whose tabletop left and whose events nobody follows holds no
// retained events in memory; they come back from the journal, numbering
// and resume included, when the world is followed again.
func TestDisconnectedWorldLeavesMemory(t *testing.T) {
	store, err := OpenSQLite(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const clientID = "fvtt_leaves0000000001"
	evs := NewEvents()
	evs.SetJournal(store)
	for i := range 5 {
		msg := []byte(`{"type":"hook-event","data":{"hook":"updateActor","args":[{"_id":"a` + strconv.Itoa(i) + `","name":"A","ownership":{"default":2}},{"_id":"a","name":"B"},{}]}}`)
		evs.Publish(clientID, Event{Type: "hook-event", Message: msg})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := evs.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	evs.Disconnected(clientID)
	evs.mu.Lock()
	_, held := evs.worlds[clientID]
	evs.mu.Unlock()
	if held {
		t.Fatal("the world's events stay in memory after its tabletop left")
	}
	sub, err := evs.subscribe(clientID, nil, world.EventRequest{Channel: world.ChannelHooks, Resume: true, After: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if got := sub.Replay(); len(got) != 3 || got[0].Seq != 3 || sub.Start() != 5 {
		t.Fatalf("resume after the world left memory: %d events from %v, start %d; want 3 from 3, start 5", len(got), got, sub.Start())
	}
	// A followed world stays.
	evs.Disconnected(clientID)
	evs.mu.Lock()
	_, held = evs.worlds[clientID]
	evs.mu.Unlock()
	if !held {
		t.Fatal("a followed world left memory")
	}
}
