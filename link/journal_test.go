package link_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
)

// TestLinkedEventsSurviveARestart: with a journal (relay.db), a linked
// world's retained events outlive the relay: after a restart, numbering
// goes on where it stopped, a resume replays what was missed with the
// same read rules (the player gets the LIMITED payload of a LIMITED
// actor's events, nothing of a hidden one's), a resume from before the
// retained window is a reset, and the journal keeps only the last
// DefaultEventRetention events.
func TestLinkedEventsSurviveARestart(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "relay.db")
	store, err := link.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	const clientID = "fvtt_0123456789abcdef"
	alice := &world.User{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hook := func(id, name string, ownership map[string]any) link.Event {
		msg, _ := json.Marshal(map[string]any{"type": "hook-event", "data": map[string]any{"hook": "updateActor", "args": []any{
			map[string]any{"_id": id, "name": name, "ownership": ownership},
			map[string]any{"_id": id, "name": name, "system": map[string]any{"hp": 1}}, map[string]any{}}}})
		return link.Event{Type: "hook-event", Message: msg}
	}
	// subscribe opens a hooks stream on a world of evs, resuming after
	// `after` when resume is set.
	subscribe := func(evs *link.Events, user *world.User, resume bool, after uint64) world.EventSubscription {
		t.Helper()
		w := link.NewLinked(nil, clientID, world.Info{}).WithEvents(evs)
		s, err := w.Subscribe(ctx, user, world.EventRequest{Channel: world.ChannelHooks, Resume: resume, After: after})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}

	first := link.NewEvents()
	first.SetJournal(store)
	total := link.DefaultEventRetention + 6
	for i := range total {
		switch i % 3 {
		case 0:
			first.Publish(clientID, hook(fmt.Sprintf("open%011d", i), fmt.Sprint("Open ", i), map[string]any{"default": 2}))
		case 1:
			first.Publish(clientID, hook(fmt.Sprintf("limited%08d", i), fmt.Sprint("Limited ", i), map[string]any{"default": 1}))
		default:
			first.Publish(clientID, hook(fmt.Sprintf("hidden%09d", i), fmt.Sprint("Hidden ", i), map[string]any{"default": 0}))
		}
	}
	// The journal is written once subscribers have the events: wait for
	// the last.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		stored, err := store.LoadEvents(ctx, clientID)
		if err == nil && len(stored) > 0 && stored[len(stored)-1].Seq == uint64(total) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the journal did not get the events")
		}
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	// The relay restarts.
	store, err = link.OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	second := link.NewEvents()
	second.SetJournal(store)
	last := uint64(total)
	s := subscribe(second, alice, true, last-4)
	if _, reset := s.Reset(); reset {
		t.Fatal("a resume within the retained events was a reset")
	}
	var got []string
	for _, ev := range s.Replay() {
		got = append(got, fmt.Sprintf("%d %s %s", ev.Seq, ev.Name, ev.Data))
	}
	// Events last-3 … last: i = total-4 … total-1.
	var want []string
	for i := total - 4; i < total; i++ {
		seq := uint64(i + 1)
		switch i % 3 {
		case 0:
			want = append(want, fmt.Sprintf(`%d updateActor {"changes":{"name":"Open %d","system":{"hp":1}},"documentName":"Actor","parentUuid":"","uuid":"Actor.open%011d"}`, seq, i, i))
		case 1:
			want = append(want, fmt.Sprintf(`%d updateActor {"changes":{"name":"Limited %d"},"documentName":"Actor","parentUuid":"","uuid":"Actor.limited%08d"}`, seq, i, i))
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replay after the restart:\n%q\nwant\n%q", got, want)
	}
	// Numbering goes on.
	second.Publish(clientID, hook("open99999999999", "Open again", map[string]any{"default": 2}))
	if ev, err := s.Next(ctx); err != nil || ev.Seq != last+1 {
		t.Fatalf("the next event: %d %v, want %d", ev.Seq, err, last+1)
	}
	// Only the last DefaultEventRetention are kept.
	old := subscribe(second, nil, true, 1)
	if r, reset := old.Reset(); !reset || r.Oldest != last+1-link.DefaultEventRetention+1 {
		t.Errorf("a resume from 1: %+v %v, want a reset with the oldest %d", r, reset, last+1-link.DefaultEventRetention+1)
	}
	stored, err := store.LoadEvents(ctx, clientID)
	if err != nil || len(stored) != link.DefaultEventRetention {
		t.Errorf("the journal holds %d events (%v), want %d", len(stored), err, link.DefaultEventRetention)
	}
	if n := second.Stats().JournalErrors + first.Stats().JournalErrors; n != 0 {
		t.Errorf("%d journal errors", n)
	}
}
