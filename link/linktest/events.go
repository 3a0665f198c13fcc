package linktest

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// The simulator's event channels. The module listens to the tabletop's
// hooks while the relay has a channel turned on and sends what they report
// in its own shapes (reference §7). The simulator does the same with an
// embedded world: it follows the world's own event streams as a GM and,
// for every event of a channel the relay turned on, sends the message the
// module would send for the same change. Events that happen while their
// channel is off are not sent, as with the module.

// moduleHooks are the hooks the module forwards on its `hooks` channel
// (§7.2).
var moduleHooks = []string{
	"createActor", "updateActor", "deleteActor", "createItem", "updateItem", "deleteItem",
	"createToken", "updateToken", "deleteToken", "createCombat", "updateCombat", "deleteCombat",
	"createCombatant", "updateCombatant", "deleteCombatant", "createScene", "updateScene", "deleteScene",
	"createActiveEffect", "updateActiveEffect", "deleteActiveEffect", "createPlaylist", "updatePlaylist", "deletePlaylist",
	"createPlaylistSound", "updatePlaylistSound", "deletePlaylistSound", "combatStart", "combatTurn", "combatRound",
	"updateWorldTime", "pauseGame", "canvasReady",
}

// mirrored maps the world's channels to the module's channels and event
// message types.
var mirrored = []struct {
	channel            world.EventChannel
	moduleCh, typeName string
}{
	{world.ChannelHooks, "hooks", "hook-event"},
	{world.ChannelActor, "actor-events", "actor-event"},
	{world.ChannelScene, "scene-events", "scene-event"},
	{world.ChannelCombat, "combat-events", "combat-event"},
}

// MirrorEvents makes the tabletop send the events of w (an embedded world
// whose events it follows as a GM) in the module's shapes, for the
// channels the relay turned on, until ctx ends or the returned stop is
// called. It fails when w offers no event streams.
func (t *Tabletop) MirrorEvents(ctx context.Context, w world.World) (stop func(), err error) {
	evs, err := world.Capability[world.Events](w, "")
	if err != nil {
		return nil, err
	}
	docs, _ := world.Capability[world.Documents](w, "")
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// The world numbers its events across channels; the module sends
	// them in the order the tabletop's hooks fire. So every channel's
	// events go through one queue and out in the world's order.
	in := make(chan mirroredEvent, 1024)
	var next uint64
	for i, m := range mirrored {
		sub, err := evs.Subscribe(ctx, nil, world.EventRequest{Channel: m.channel})
		if err != nil {
			cancel()
			wg.Wait()
			return nil, err
		}
		next = max(next, sub.Start()+1)
		wg.Go(func() {
			defer sub.Close()
			for {
				ev, err := sub.Next(ctx)
				if err != nil {
					return
				}
				select {
				case in <- mirroredEvent{m: i, ev: ev}:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	prog := &progress{done: next - 1, wake: make(chan struct{})}
	wg.Go(func() { t.emitInOrder(ctx, docs, in, next, prog) })
	// The module sends a change's events before its reply (reference
	// §9.14): each reply waits until the events of the world so far are
	// sent.
	t.setBeforeReply(func(rctx context.Context) {
		sub, err := evs.Subscribe(rctx, nil, world.EventRequest{Channel: world.ChannelHooks})
		if err != nil {
			return
		}
		head := sub.Start()
		sub.Close()
		wait, cancelWait := context.WithTimeout(rctx, 2*time.Second)
		defer cancelWait()
		prog.waitFor(wait, head)
	})
	return func() { t.setBeforeReply(nil); cancel(); wg.Wait() }, nil
}

// progress is how far the emitter got in the world's sequence.
type progress struct {
	mu   sync.Mutex
	done uint64
	wake chan struct{} // closed and replaced when done moves
}

// advance records that every event up to seq was handled.
func (p *progress) advance(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq > p.done {
		p.done = seq
		close(p.wake)
		p.wake = make(chan struct{})
	}
}

// waitFor waits until every event up to seq was handled, or ctx ends.
func (p *progress) waitFor(ctx context.Context, seq uint64) {
	for {
		p.mu.Lock()
		done, wake := p.done, p.wake
		p.mu.Unlock()
		if done >= seq {
			return
		}
		select {
		case <-wake:
		case <-ctx.Done():
			return
		}
	}
}

// mirroredEvent is one of the world's events and the channel it came on
// (an index into mirrored).
type mirroredEvent struct {
	m  int
	ev world.Event
}

// emitInOrder sends the events of in in the world's order, from the
// sequence next on. An event missing for longer than a moment (dropped by
// a subscription that fell behind) is given up on.
func (t *Tabletop) emitInOrder(ctx context.Context, docs world.Documents, in <-chan mirroredEvent, next uint64, prog *progress) {
	// The documents as the hooks last showed them, for the deletions,
	// whose hooks get the document as it was.
	seen := map[string]map[string]any{}
	pending := map[uint64]mirroredEvent{}
	gap := time.NewTimer(time.Hour)
	gap.Stop()
	emit := func(me mirroredEvent) {
		m := mirrored[me.m]
		if !t.channelOn(m.moduleCh) {
			return
		}
		data, ok := moduleEvent(ctx, docs, seen, m.channel, me.ev)
		if !ok {
			return
		}
		if err := t.Emit(m.typeName, data); err != nil {
			t.cfg.Log.Debug("event not sent", "type", m.typeName, "error", err)
		}
	}
	flush := func() {
		for {
			me, ok := pending[next]
			if !ok {
				break
			}
			delete(pending, next)
			next++
			emit(me)
			prog.advance(next - 1)
		}
		if len(pending) > 0 {
			gap.Reset(200 * time.Millisecond)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case me := <-in:
			if me.ev.Seq >= next {
				pending[me.ev.Seq] = me
				flush()
			}
		case <-gap.C:
			if len(pending) > 0 {
				next = slices.Min(slices.Collect(maps.Keys(pending)))
				flush()
			}
		}
	}
}

// channelOn reports whether the relay turned the module channel on.
func (t *Tabletop) channelOn(ch string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.channels[ch]
}

// moduleEvent is the `data` of the module's message for one of the world's
// events (GM payload), or false when the module sends nothing for it.
func moduleEvent(ctx context.Context, docs world.Documents, seen map[string]map[string]any, ch world.EventChannel, ev world.Event) (map[string]any, bool) {
	var p map[string]any
	if json.Unmarshal(ev.Data, &p) != nil {
		return nil, false
	}
	switch ch {
	case world.ChannelHooks:
		return hookEvent(ctx, docs, seen, ev.Name, p)
	case world.ChannelActor:
		return actorEvent(ev.Name, p)
	case world.ChannelScene:
		return sceneEvent(ev.Name, p)
	case world.ChannelCombat:
		return combatEvent(ev.Name, p)
	}
	return nil, false
}

// hookEvent is a `hook-event`'s data: the hook's name and its arguments
// (§7.2), each as the tabletop's `toObject` gives it: the document (without
// a uuid, which the tabletop does not store), then for an update the
// changes (with the document's `_id`), then the operation's options, whose
// `parent` (the parent document's source) places an embedded document. seen keeps the documents as
// the hooks last showed them (a deletion's hook gets the document as it
// was, which the world's event does not carry).
func hookEvent(ctx context.Context, docs world.Documents, seen map[string]map[string]any, name string, p map[string]any) (map[string]any, bool) {
	if len(seen) > 10000 {
		clear(seen)
	}
	if !slices.Contains(moduleHooks, name) {
		return nil, false
	}
	switch name {
	case "combatStart", "combatTurn", "combatRound":
		combat := moduleCombat(combatSource(p))
		return map[string]any{"hook": name, "args": []any{combat, map[string]any{"round": p["round"], "turn": p["turn"]}}}, true
	}
	uuid, _ := p["uuid"].(string)
	options := map[string]any{}
	if parent, _ := p["parentUuid"].(string); parent != "" {
		// The changes made in the module's own browser carry their
		// parent document in the hook's options, not its uuid: the
		// module serialises it into its source data.
		options["parent"] = parentSource(ctx, docs, parent)
	}
	id := uuid[strings.LastIndexByte(uuid, '.')+1:]
	// Combats and combatants as the tabletop stores those the module
	// added (combatants.go).
	asStored := func(doc map[string]any) map[string]any {
		switch {
		case strings.HasSuffix(name, "Combatant"):
			return moduleCombatant(doc)
		case strings.HasSuffix(name, "Combat"):
			return moduleCombat(doc)
		}
		return doc
	}
	switch {
	case strings.HasPrefix(name, "create"):
		doc := asStored(without(asMap(p["data"]), "uuid"))
		seen[uuid] = doc
		return map[string]any{"hook": name, "args": []any{doc, options}}, true
	case strings.HasPrefix(name, "update"):
		// The hook gets the document as it is after the change.
		doc := world.Document{"_id": id}
		if docs != nil {
			if d, err := docs.Get(ctx, nil, uuid); err == nil {
				doc = d
			}
		}
		changes, _ := p["changes"].(map[string]any)
		changes = maps.Clone(changes)
		changes["_id"] = id
		seen[uuid] = asStored(without(doc, "uuid"))
		return map[string]any{"hook": name, "args": []any{seen[uuid], changes, options}}, true
	default:
		// The document is gone: as the hooks last showed it, else what
		// the world's event kept of it.
		doc := seen[uuid]
		delete(seen, uuid)
		if doc == nil {
			doc = map[string]any{"_id": id, "name": p["name"]}
		}
		return map[string]any{"hook": name, "args": []any{doc, options}}, true
	}
}

// parentSource is the parent document of a hook as the module's options
// carry it: its source data, without a uuid (the tabletop stores none);
// only its `_id` when the world cannot give it.
func parentSource(ctx context.Context, docs world.Documents, uuid string) map[string]any {
	if docs != nil {
		if d, err := docs.Get(ctx, nil, uuid); err == nil {
			return without(d, "uuid")
		}
	}
	return map[string]any{"_id": uuid[strings.LastIndexByte(uuid, '.')+1:]}
}

// combatSource is a combat's stored data, rebuilt from the combat state an
// event carries: what the combat hooks get as their first argument.
func combatSource(p map[string]any) map[string]any {
	list, _ := p["combatants"].([]any)
	combatants := make([]any, 0, len(list))
	scene := ""
	for _, c := range list {
		s, _ := c.(map[string]any)
		cb := map[string]any{"_id": s["id"], "name": s["name"], "initiative": s["initiative"], "defeated": s["defeated"], "hidden": s["hidden"]}
		if a, _ := s["actorUuid"].(string); a != "" {
			cb["actorId"] = strings.TrimPrefix(a, "Actor.")
		}
		if tok, _ := s["tokenUuid"].(string); tok != "" {
			parts := strings.Split(tok, ".")
			if len(parts) == 4 {
				cb["sceneId"], cb["tokenId"] = parts[1], parts[3]
				scene = parts[1]
			}
		}
		combatants = append(combatants, cb)
	}
	out := map[string]any{"_id": p["encounterId"], "round": p["round"], "turn": p["turn"], "started": p["started"], "active": p["active"],
		"combatants": combatants}
	if scene != "" {
		out["scene"] = scene
	}
	return out
}

// actorEvent is an `actor-event`'s data (§7.4): the actor's uuid, the
// kind of change and its details.
func actorEvent(name string, p map[string]any) (map[string]any, bool) {
	actorUUID := p["actorUuid"]
	out := map[string]any{"actorUuid": actorUUID}
	switch name {
	case "actor-update":
		out["eventType"] = "update"
		out["changes"] = withID(p["changes"], strings.TrimPrefix(str(actorUUID), "Actor."))
	case "actor-item-add":
		out["eventType"], out["item"] = "item-add", without(asMap(p["item"]), "uuid")
	case "actor-item-update":
		out["eventType"], out["itemId"], out["itemName"] = "item-update", p["itemId"], p["itemName"]
		out["changes"] = withID(p["changes"], str(p["itemId"]))
	case "actor-item-remove":
		out["eventType"], out["itemId"], out["itemName"] = "item-remove", p["itemId"], p["itemName"]
	case "actor-effect-add":
		out["eventType"], out["effect"] = "effect-add", without(asMap(p["effect"]), "uuid")
	case "actor-effect-remove":
		out["eventType"], out["effectId"], out["effectName"] = "effect-remove", p["effectId"], p["effectName"]
	default:
		return nil, false
	}
	return out, true
}

// sceneEvent is a `scene-event`'s data (§7.5). The module reports tokens
// and the scene's activation; it has no event for other changes of the
// scene.
func sceneEvent(name string, p map[string]any) (map[string]any, bool) {
	out := map[string]any{"sceneId": p["sceneId"]}
	switch name {
	case "scene-token-create":
		out["eventType"], out["token"] = "token-create", without(asMap(p["token"]), "uuid")
	case "scene-token-update":
		out["eventType"], out["tokenId"] = "token-update", p["tokenId"]
		out["changes"] = withID(p["changes"], str(p["tokenId"]))
	case "scene-token-delete":
		out["eventType"], out["tokenId"], out["tokenName"] = "token-delete", p["tokenId"], p["tokenName"]
	case "scene-activate":
		out["eventType"], out["name"] = "scene-activate", p["name"]
	default:
		return nil, false
	}
	return out, true
}

// combatEvent is a `combat-event`'s data (§7.3): the module lists each
// combatant as `{id, name, initiative, defeated, uuid}` and reports a
// round change as a turn.
func combatEvent(name string, p map[string]any) (map[string]any, bool) {
	summary := func(v any) map[string]any {
		s := asMap(v)
		return map[string]any{"id": s["id"], "name": s["name"], "initiative": s["initiative"], "defeated": s["defeated"], "uuid": s["uuid"]}
	}
	out := map[string]any{"encounterId": p["encounterId"]}
	switch name {
	case "combat-start", "combat-turn", "combat-round":
		out["eventType"] = "start"
		if name != "combat-start" {
			out["eventType"] = "turn"
		}
		list, _ := p["combatants"].([]any)
		cs := make([]any, len(list))
		for i, c := range list {
			cs[i] = summary(c)
		}
		out["round"], out["turn"], out["started"], out["combatants"] = p["round"], p["turn"], p["started"], cs
	case "combat-end":
		out["eventType"], out["round"] = "end", p["round"]
	case "combat-combatant-add", "combat-combatant-remove":
		out["eventType"] = strings.TrimPrefix(name, "combat-")
		out["combatant"] = summary(p["combatant"])
	default:
		return nil, false
	}
	return out, true
}

// withID returns changes with the changed document's `_id`, as the
// tabletop's update hooks report them.
func withID(changes any, id string) map[string]any {
	out := maps.Clone(asMap(changes))
	if out == nil {
		out = map[string]any{}
	}
	out["_id"] = id
	return out
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// without returns a copy of m without the keys.
func without(m map[string]any, keys ...string) map[string]any {
	out := maps.Clone(m)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}
