package world

import (
	"context"
	"maps"
	"slices"
	"strings"
)

// Update applies an update diff to a document, with the tabletop's update
// semantics:
//
//   - keys may be dotted paths: {"system.attributes.hp.value": 5};
//   - objects merge into objects recursively (the tabletop's mergeObject);
//     any other value, arrays included, replaces what was there;
//   - `-=key` deletes a key ({"system.-=temp": null}) and `==key` replaces
//     an object whole instead of merging into it;
//   - embedded collections (`items`, `effects`, `tokens`, `pages`,
//     `combatants`) cannot be replaced through the parent: update embedded
//     documents through their own uuids. `_id`, `uuid` and `_stats` cannot
//     change; an `_id` or `uuid` equal to the document's own (as returned
//     by Get) is ignored;
//   - a given `name` must be a non-empty string.
//
// In a world of a game system with rules for its data (fifth edition: a
// character's or NPC's numbers, see systemRules), the values written are
// cleaned and checked as the system's data model does, and a bad one
// refuses the whole update naming the field; hit points raised from 0 or
// below clear the death saves.
//
// The user needs OWNER. Changing `ownership` (in any form: `ownership`,
// `ownership.<id>`, `-=ownership`) or `type` is for GMs only, on embedded
// documents too, and a new `folder` must exist, hold the document's type
// and, for a non-GM, be a folder the user sees. The world's [Limits] apply:
// a diff nesting too deeply (dotted keys counted) or holding a refused key
// is ErrInvalid, a result over the document size limit ErrTooLarge. The
// result is the updated document, as Get returns it.
func (e *Engine) Update(ctx context.Context, user *User, uuid string, data Document) (Document, error) {
	stored, _, err := e.update(ctx, user, uuid, data)
	if err != nil {
		return nil, err
	}
	// Copied once the write lock is released: stored versions never change.
	return fullData(uuid, stored), nil
}

// UpdateJSON is [Engine.Update] with the result serialised as JSON, the
// bytes GetJSON gives for that version, for callers that pass documents on
// as JSON: it skips Update's private copy and usually finds the JSON the
// commit already made. The bytes are shared and must not be changed.
func (e *Engine) UpdateJSON(ctx context.Context, user *User, uuid string, data Document) ([]byte, error) {
	stored, req, err := e.update(ctx, user, uuid, data)
	if err != nil {
		return nil, err
	}
	// A top-level document's JSON was made by its commit, for the store
	// and the cache; an embedded one's is cheap to make.
	if raw, ok := req.committedJSON(stored); ok {
		return raw, nil
	}
	raw, err := e.json.full(uuid, stored)
	if err != nil {
		return nil, Wrapf(ErrUnavailable, err, "Could not serialise %s", uuid)
	}
	return raw, nil
}

// update commits an update and returns the stored version of the document
// and the commit's request (nil when nothing was written).
func (e *Engine) update(ctx context.Context, user *User, uuid string, data Document) (Document, *commitReq, error) {
	if uuid == "" {
		return nil, nil, Errorf(ErrInvalid, "'uuid' is required")
	}
	if data == nil {
		return nil, nil, Errorf(ErrInvalid, "'data' must be an object")
	}
	var stored Document
	req, err := e.mutateReq(ctx, nil, func(tx *Tx) error {
		v := tx.View()
		r, top, doc, err := v.find(uuid)
		if err != nil {
			return err
		}
		if err := v.requireOwner(user, r, top, doc, "update"); err != nil {
			return err
		}
		if !user.IsGM() && touchesOwnership(data) {
			return errNoWrite(user, "change the ownership of", r.uuid, doc)
		}
		if stored, err = tx.update(uuid, data); err != nil {
			return err
		}
		// Checked on the result, whatever path the diff took to it; a
		// refusal fails the transaction, so nothing is written.
		return tx.before().checkWrite(user, r, doc, stored)
	})
	if err != nil {
		return nil, nil, err
	}
	return stored, req, nil
}

// touchesOwnership reports whether an update diff changes `ownership`.
func touchesOwnership(diff Document) bool {
	for k := range diff {
		if topField(k) == "ownership" {
			return true
		}
	}
	return false
}

// topField returns the top-level field a diff key addresses:
// "-=ownership" and "ownership.abc" both address "ownership".
func topField(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "-="), "==")
	field, _, _ := strings.Cut(key, ".")
	return field
}

// applyDiff returns a new version of cur with an update diff applied (see
// [Engine.Update] for the rules), refusing a diff that breaks lim's depth
// or key rules. cur is not changed; the new version
// shares with cur whatever the diff does not touch (the embedded
// collections, which a diff cannot touch, and every untouched object), so
// that comparing the two versions, for stamps and events, costs only the
// size of the diff.
func applyDiff(t *docType, uuid string, cur, diff Document, lim Limits, rules *systemRules) (Document, error) {
	if diff == nil {
		return nil, Errorf(ErrInvalid, "'data' must be an object")
	}
	norm, err := normalizeDoc("data", diff, lim)
	if err != nil {
		return nil, err
	}
	expanded, err := expand(norm)
	if err != nil {
		return nil, err
	}
	// Dotted keys nest too: {"a.b.c": 1} is {"a": {"b": {"c": 1}}}.
	if limit := lim.maxDepth(); depthOver(expanded, 1, limit) {
		return nil, Errorf(ErrInvalid, "'data' nests deeper than the limit of %d levels once its dotted keys are expanded", limit)
	}
	typ, _ := expanded["type"].(string)
	if typ == "" {
		typ = str(cur["type"])
	}
	if err := rules.clean(t, typ, expanded); err != nil {
		return nil, err
	}
	for k, v := range expanded {
		switch field := topField(k); {
		case field == "uuid":
			// A document read back with Get holds its own uuid, which may
			// come back as it is; anything else would be a change that
			// the world cannot make, and is refused rather than ignored.
			if k != "uuid" || v != uuid {
				return nil, Errorf(ErrInvalid, "'uuid' cannot be changed: it is the document's address")
			}
			delete(expanded, k)
		case field == "_id":
			if k != "_id" || v != cur["_id"] {
				return nil, Errorf(ErrInvalid, "'_id' cannot be changed")
			}
			delete(expanded, k)
		case field == "_stats":
			return nil, Errorf(ErrInvalid, "'_stats' is kept by the world and cannot be changed")
		case t.isEmbeddedKey(field):
			return nil, Errorf(ErrInvalid, "'%s' holds embedded documents and cannot be changed through its parent; update them through their own uuids", field)
		}
	}
	next := maps.Clone(cur)
	mergeShared(next, expanded)
	if err := validateOwn(t, next); err != nil {
		return nil, err
	}
	return next, nil
}

// expand turns dotted keys into nested objects, at every depth, like the
// tabletop's expandObject. Keys are taken in sorted order so that the
// result does not depend on map order: {"system": {...}, "system.x": 1}
// merges x into system. A deletion key (`-=x`) must be the last step of a
// path, and a replacement key cannot name a deletion (`==-=x`).
func expand(m map[string]any) (map[string]any, error) {
	keys := slices.Sorted(maps.Keys(m))
	out := make(map[string]any, len(m))
	for _, k := range keys {
		v := m[k]
		if sub, ok := v.(map[string]any); ok {
			var err error
			if v, err = expand(sub); err != nil {
				return nil, err
			}
		}
		path := strings.Split(k, ".")
		for i, p := range path {
			// "==-=x" would store a key named "-=x" (found by FuzzApplyDiff).
			if p == "" || p == "-=" || p == "==" || strings.HasPrefix(p, "==-=") || i < len(path)-1 && strings.HasPrefix(p, "-=") {
				return nil, Errorf(ErrInvalid, "Invalid key in 'data': %s", k)
			}
		}
		setPath(out, path, v)
	}
	return out, nil
}

// setPath sets a value at a path of a fresh object, creating objects on the
// way and merging into an object already there.
func setPath(m map[string]any, path []string, v any) {
	for _, p := range path[:len(path)-1] {
		child, ok := m[p].(map[string]any)
		if !ok {
			child = map[string]any{}
			m[p] = child
		}
		m = child
	}
	last := path[len(path)-1]
	if old, ok := m[last].(map[string]any); ok {
		if add, ok := v.(map[string]any); ok {
			merge(old, add)
			return
		}
	}
	m[last] = v
}

// mergeShared is merge on a target whose objects are shared with a stored
// version: an object the diff merges into is copied first, so only the
// objects along the diff's paths are new.
func mergeShared(target, diff map[string]any) { mergeDiff(target, diff, true) }

// merge applies an expanded diff to a fresh target in place, as the
// tabletop's mergeObject does for updates: deletions (`-=key`) first, then
// `==key` replacements and recursive merges of objects into objects; every
// other value replaces the old one. Objects inserted where there was none
// are built through merge as well, so no `-=` key is ever stored.
func merge(target, diff map[string]any) { mergeDiff(target, diff, false) }

// mergeDiff is merge, copying each object it merges into first when
// shared is set.
func mergeDiff(target, diff map[string]any, shared bool) {
	for k := range diff {
		if field, ok := strings.CutPrefix(k, "-="); ok {
			delete(target, field)
		}
	}
	for k, v := range diff {
		if strings.HasPrefix(k, "-=") {
			continue
		}
		field, replace := strings.CutPrefix(k, "==")
		add, isObject := v.(map[string]any)
		if old, ok := target[field].(map[string]any); ok && isObject && !replace {
			if shared {
				old = maps.Clone(old)
				target[field] = old
			}
			mergeDiff(old, add, shared)
			continue
		}
		if isObject {
			fresh := make(map[string]any, len(add))
			mergeDiff(fresh, add, false)
			v = fresh
		}
		target[field] = v
	}
}
