package world

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
)

// metaSettings is the meta key holding the world's settings as a JSON
// object.
const metaSettings = "settings"

// Setting returns a world setting (nil when it is not set): the
// tabletop's `game.settings.get("<namespace>", "<key>")` is
// Setting("<namespace>.<key>"). The fifth-edition rules read
// `dnd5e.initiativeDexTiebreaker`, for one.
func (e *Engine) Setting(key string) any {
	if m := e.settings.Load(); m != nil {
		return (*m)[key]
	}
	return nil
}

// SetSetting stores a world setting (a JSON value; nil removes it) in the
// world's database, durably, before it takes effect. Keys are
// `<namespace>.<key>`.
func (e *Engine) SetSetting(ctx context.Context, key string, value any) error {
	if ns, k, ok := strings.Cut(key, "."); !ok || ns == "" || k == "" {
		return Errorf(ErrInvalid, "A setting key is written namespace.key, got %q", key)
	}
	e.settingsMu.Lock()
	defer e.settingsMu.Unlock()
	next := map[string]any{}
	if m := e.settings.Load(); m != nil {
		next = maps.Clone(*m)
	}
	if value == nil {
		delete(next, key)
	} else {
		next[key] = value
	}
	raw, err := json.Marshal(next)
	if err != nil {
		return Errorf(ErrInvalid, "Setting %s is not a JSON value: %v", key, err)
	}
	if err := e.mutate(ctx, map[string]string{metaSettings: string(raw)}, func(*Tx) error { return nil }); err != nil {
		return err
	}
	e.settings.Store(&next)
	return nil
}

// loadSettings reads the settings kept in the world's meta.
func loadSettings(meta map[string]string) (map[string]any, error) {
	out := map[string]any{}
	if raw := meta[metaSettings]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &out); err != nil {
			return nil, fmt.Errorf("reading the settings: %w", err)
		}
	}
	return out, nil
}
