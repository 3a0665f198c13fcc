package world

import (
	"context"
	"testing"
)

// TestSettings: world settings are kept in the world's database, survive
// a restart, and come from the seed.
func TestSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	if v := tw.Setting("dnd5e.initiativeDexTiebreaker"); v != nil {
		t.Fatalf("unset setting = %v", v)
	}
	if err := tw.SetSetting(ctx, "dnd5e.initiativeDexTiebreaker", true); err != nil {
		t.Fatal(err)
	}
	if err := tw.SetSetting(ctx, "core.time", 12.0); err != nil {
		t.Fatal(err)
	}
	if err := tw.SetSetting(ctx, "core.time", nil); err != nil {
		t.Fatal(err)
	}
	err := tw.SetSetting(ctx, "nonamespace", 1.0)
	wantError(t, err, ErrInvalid, `A setting key is written namespace.key, got "nonamespace"`)
	e := tw.reopen(t)
	defer e.Close()
	if e.Setting("dnd5e.initiativeDexTiebreaker") != true || e.Setting("core.time") != nil {
		t.Fatalf("after a restart: %v %v", e.Setting("dnd5e.initiativeDexTiebreaker"), e.Setting("core.time"))
	}

	h, err := OpenHost(t.TempDir(), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	seed := testSeed()
	seed.Settings = map[string]any{"dnd5e.initiativeDexTiebreaker": true}
	w, err := h.Create(ctx, "seeded", seed)
	if err != nil {
		t.Fatal(err)
	}
	if w.Setting("dnd5e.initiativeDexTiebreaker") != true {
		t.Fatal("the seed's setting is missing")
	}
}
