package dnd5e

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/dice"
)

// Demo world uuids used by the tests.
const (
	aria      = "Actor.ariaVale00000001"
	brom      = "Actor.bromIronfist0001"
	goblin    = "Actor.goblin0000000001"
	wand      = aria + ".Item.wandMagicMissile"
	ring      = aria + ".Item.ringProtection01"
	fireBolt  = aria + ".Item.fireBolt00000001"
	holdPers  = aria + ".Item.holdPerson000001"
	wizard    = aria + ".Item.ariaWizard000001"
	fighter   = brom + ".Item.bromFighter00001"
	secondWnd = brom + ".Item.secondWind000001"
	surge     = brom + ".Item.actionSurge00001"
	potion    = brom + ".Item.bromPotionHeal01"
)

// fixture is a demo world with fixed dice and a fixed clock.
type fixture struct {
	t     *testing.T
	e     *world.Engine
	rules *Rules
	dice  *dice.Sequence
	ctx   context.Context
}

// newFixture creates the demo world in a temporary directory; rolls come
// from the given sequence.
func newFixture(t *testing.T, rolls ...int) *fixture {
	t.Helper()
	host, err := world.OpenHost(t.TempDir(), world.Options{Clock: func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	w, err := host.Create(context.Background(), "test", seed)
	if err != nil {
		t.Fatal(err)
	}
	seq := dice.NewSequence(rolls...)
	return &fixture{t: t, e: w, rules: New(seq), dice: seq, ctx: context.Background()}
}

// roll replaces the dice with a new sequence.
func (f *fixture) roll(values ...int) {
	f.dice = dice.NewSequence(values...)
	f.rules = New(f.dice)
}

// user resolves a demo user by name.
func (f *fixture) user(name string) *world.User {
	f.t.Helper()
	u, err := f.e.ResolveUser(f.ctx, name)
	if err != nil {
		f.t.Fatal(err)
	}
	return u
}

// get reads a document with GM access.
func (f *fixture) get(uuid string) world.Document {
	f.t.Helper()
	doc, err := f.e.Get(f.ctx, nil, uuid)
	if err != nil {
		f.t.Fatal(err)
	}
	return doc
}

// value reads a dotted path of a document.
func (f *fixture) value(uuid, path string) any {
	f.t.Helper()
	return at(f.get(uuid), path)
}

// set updates a document with GM access.
func (f *fixture) set(uuid string, data world.Document) {
	f.t.Helper()
	if _, err := f.e.Update(f.ctx, nil, uuid, data); err != nil {
		f.t.Fatal(err)
	}
}

// create adds a document with GM access and returns its uuid.
func (f *fixture) create(typ, parent string, data world.Document) string {
	f.t.Helper()
	doc, err := f.e.Create(f.ctx, nil, world.CreateParams{Type: typ, ParentUUID: parent, Data: data})
	if err != nil {
		f.t.Fatal(err)
	}
	return str(doc["uuid"])
}

// chatCount counts chat messages.
func (f *fixture) chatCount() int {
	n := 0
	_ = f.e.View(f.ctx, func(v *world.View) error {
		v.Each("ChatMessage", func(world.Document) bool { n++; return true })
		return nil
	})
	return n
}

// chats returns the chat messages.
func (f *fixture) chats() []world.Document {
	var out []world.Document
	_ = f.e.View(f.ctx, func(v *world.View) error {
		v.Each("ChatMessage", func(d world.Document) bool { out = append(out, d); return true })
		return nil
	})
	return out
}

// wantErr checks an error's kind and that its text contains want.
func wantErr(t *testing.T, err error, kind error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v %q", kind, want)
	}
	if !errors.Is(err, kind) || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v (%T), want kind %v containing %q", err, err, kind, want)
	}
}

// must fails the test on an error: must(call())(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}
