package world

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The canvas is the active scene (the Scene with `active: true`). Tokens on
// it can be selected ("controlled", in the tabletop's words) for later
// operations. A selection is not document data: it lives in memory, one per
// world, and is lost when the world closes.

// selection is the world's list of selected token uuids, in the order they
// were selected.
type selection struct {
	mu     sync.Mutex
	tokens []string
}

// Select selects tokens of the active scene (GM only): every token with
// p.All, plus those whose uuid is in p.UUIDs, whose name is p.Name
// (case-insensitively) or that match p.Match (every key equal; keys
// starting `actor.` read the token's actor, others the token, both as
// dotted paths). The selection grows; p.Overwrite clears it first. It
// returns the uuids of the tokens matched; matching none is ErrNotFound
// `No matching entities found`.
func (e *Engine) Select(ctx context.Context, user *User, p SelectParams) ([]string, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	if err := requireGM(user, "select tokens"); err != nil {
		return nil, err
	}
	if !p.All && len(p.UUIDs) == 0 && p.Name == "" && len(p.Match) == 0 {
		return nil, Errorf(ErrInvalid, "One of 'uuids', 'name', 'data' or 'all' is required")
	}
	var match Document
	if len(p.Match) > 0 {
		var err error
		if match, err = normalizeDoc("data", p.Match, e.limits); err != nil {
			return nil, err
		}
	}
	v := e.view()
	scene, err := v.ActiveScene()
	if err != nil {
		return nil, err
	}
	prefix := tokenPrefix(scene)
	var matched []string
	for _, d := range docsOf(scene, sceneTokens.key) {
		token := d.(map[string]any)
		uuid := prefix + str(token["_id"])
		if p.All || slices.Contains(p.UUIDs, uuid) ||
			p.Name != "" && strings.EqualFold(docName(token), p.Name) ||
			match != nil && tokenMatches(v, token, match) {
			matched = append(matched, uuid)
		}
	}
	if len(matched) == 0 {
		return nil, Errorf(ErrNotFound, "No matching entities found")
	}

	e.selection.mu.Lock()
	defer e.selection.mu.Unlock()
	kept := e.selection.tokens[:0:0]
	if !p.Overwrite {
		// Selections belong to a scene: forget those of another one.
		for _, uuid := range e.selection.tokens {
			if strings.HasPrefix(uuid, prefix) {
				kept = append(kept, uuid)
			}
		}
	}
	for _, uuid := range matched {
		if !slices.Contains(kept, uuid) {
			kept = append(kept, uuid)
		}
	}
	e.selection.tokens = kept
	return matched, nil
}

// Selected lists the selected tokens of the active scene that still exist,
// with their actors (GM only).
func (e *Engine) Selected(ctx context.Context, user *User) ([]SelectedToken, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	if err := requireGM(user, "get selected tokens"); err != nil {
		return nil, err
	}
	scene, err := e.view().ActiveScene()
	if err != nil {
		return nil, err
	}
	prefix := tokenPrefix(scene)
	e.selection.mu.Lock()
	selected := slices.Clone(e.selection.tokens)
	e.selection.mu.Unlock()

	tokens := docsOf(scene, sceneTokens.key)
	out := []SelectedToken{}
	for _, uuid := range selected {
		id, ok := strings.CutPrefix(uuid, prefix)
		if !ok {
			continue
		}
		i := indexOf(tokens, id)
		if i < 0 {
			continue // deleted since it was selected
		}
		st := SelectedToken{TokenUUID: uuid}
		if actorID := str(tokens[i].(map[string]any)["actorId"]); actorID != "" {
			st.ActorUUID = typeActor.name + "." + actorID
		}
		out = append(out, st)
	}
	return out, nil
}

// tokenPrefix is the start of the uuids of a scene's tokens.
func tokenPrefix(scene Document) string {
	return typeScene.name + "." + str(scene["_id"]) + "." + typeToken.name + "."
}

// tokenMatches reports whether every key of match equals the token's (or,
// for `actor.` keys, its actor's) value at that path.
func tokenMatches(v *View, token Document, match Document) bool {
	var actor Document
	for k, want := range match {
		doc, path := token, k
		if rest, ok := strings.CutPrefix(k, "actor."); ok {
			if actor == nil {
				if actor = v.top(docKey{typeActor, str(token["actorId"])}); actor == nil {
					return false
				}
			}
			doc, path = actor, rest
		}
		got, ok := Property(doc, path)
		if !ok || !reflect.DeepEqual(got, want) {
			return false
		}
	}
	return true
}
