package link

import (
	"encoding/json"
	"strings"
)

// The module adds a token to a combat as `{tokenId, sceneId}` (reference
// §6, start-encounter and add-to-encounter), so the tabletop stores such a
// combatant without its `actorId`: the combatant's actor is its token's.
// The relay fills the combatant's `actorId` in from its token before its
// events are built, so that combat events name the actor (`actorUuid`) and
// combatant hooks carry it, as an embedded world's do. A token's actor is
// learnt from the token hooks the relay sees, or else asked of the module
// once and kept.

// noteTokenActor records the actor of the token tokenUUID ("" for a token
// without one).
func (w *worldEvents) noteTokenActor(tokenUUID, actorID string) {
	if w.tokenActors == nil {
		w.tokenActors = map[string]string{}
	}
	if _, ok := w.tokenActors[tokenUUID]; !ok && len(w.tokenActors) >= DefaultKnownDocuments {
		clear(w.tokenActors)
	}
	w.tokenActors[tokenUUID] = actorID
}

// combatantToken is the uuid of the token of a combatant that has no
// `actorId`, or "" when it has one or no token to take it from. scene is
// the combat's scene, for a combatant without its own `sceneId`.
func combatantToken(cb map[string]any, scene string) string {
	if cb == nil || str(cb["actorId"]) != "" {
		return ""
	}
	token := str(cb["tokenId"])
	if s := str(cb["sceneId"]); s != "" {
		scene = s
	}
	if token == "" || scene == "" {
		return ""
	}
	return "Scene." + scene + ".Token." + token
}

// withTokenActor returns cb with its `actorId` filled in from its token's
// actor when the relay knows it; cb itself otherwise.
func (w *worldEvents) withTokenActor(cb map[string]any, scene string) map[string]any {
	tok := combatantToken(cb, scene)
	if tok == "" {
		return cb
	}
	actor := w.tokenActors[tok]
	if actor == "" {
		return cb
	}
	return with(cb, "actorId", actor)
}

// withCombatantActors returns a combat with each combatant's `actorId`
// filled in from its token's actor where the relay knows it.
func (w *worldEvents) withCombatantActors(combat map[string]any) map[string]any {
	list, _ := combat["combatants"].([]any)
	if len(list) == 0 {
		return combat
	}
	scene := str(combat["scene"])
	out := make([]any, len(list))
	for i, c := range list {
		if cb := asMap(c); cb != nil {
			out[i] = w.withTokenActor(cb, scene)
		} else {
			out[i] = c
		}
	}
	return with(combat, "combatants", out)
}

// unknownTokens returns the tokens of the combatants a message or a combat
// shows without an actor, whose actor the relay does not know yet.
func (w *worldEvents) unknownTokens(tokens []string) []string {
	var need []string
	for _, t := range tokens {
		if _, ok := w.tokenActors[t]; !ok && t != "" {
			need = append(need, t)
		}
	}
	return need
}

// combatTokens lists the tokens of a combat's combatants without an actor.
func combatTokens(combat map[string]any) []string {
	list, _ := combat["combatants"].([]any)
	scene := str(combat["scene"])
	var out []string
	for _, c := range list {
		if t := combatantToken(asMap(c), scene); t != "" {
			out = append(out, t)
		}
	}
	return out
}

// messageTokens lists the tokens of the combatants without an actor that
// a module's hook message shows: a combatant's hook, or a combat's.
func messageTokens(ev Event) []string {
	if ev.Type != "hook-event" {
		return nil
	}
	var outer struct {
		Data struct {
			Hook string `json:"hook"`
			Args []any  `json:"args"`
		} `json:"data"`
	}
	if json.Unmarshal(ev.Message, &outer) != nil || len(outer.Data.Args) == 0 {
		return nil
	}
	doc := asMap(outer.Data.Args[0])
	switch name := outer.Data.Hook; {
	case strings.HasSuffix(name, "Combatant"):
		if t := combatantToken(doc, ""); t != "" {
			return []string{t}
		}
	case strings.HasSuffix(name, "Combat") || strings.HasPrefix(name, "combat"):
		return combatTokens(doc)
	}
	return nil
}

// learnTokenActors asks the module for each token of tokens and records
// its actor; e.mu is held, and let go while the module answers. A token
// the module cannot give is recorded without an actor, so it is not
// asked about again.
func (e *Events) learnTokenActors(clientID string, w *worldEvents, tokens []string) {
	if len(tokens) == 0 || e.hub == nil {
		return
	}
	w.ask(e)
	e.mu.Unlock()
	actors := make([]string, len(tokens))
	for i, t := range tokens {
		if doc := e.fetchDoc(clientID, t); doc != nil {
			actors[i] = str(doc["actorId"])
		}
	}
	e.mu.Lock()
	w.asking = false
	for i, t := range tokens {
		w.noteTokenActor(t, actors[i])
	}
}
