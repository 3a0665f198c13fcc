package link

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/events"
)

// The module sends its events in its own shapes (reference §7): a hook
// event is the hook's name and its arguments (the document as the
// tabletop stores it, the changes, the operation's options), an actor
// event names the actor and what happened to it, and so on. Subscribers
// of a linked world get the relay's shapes instead, the ones embedded
// worlds send (see the Event message of the contract), so that a client
// cannot tell a linked world's events from an embedded one's. This file
// rebuilds them from the module's messages, with the payloads for each
// kind of reader (GM, OBSERVER or OWNER, LIMITED) and what the relay knows
// of who may read them.
//
// Some of it the module's messages do not carry: its combat events list
// combatants without `hidden`, `actorUuid` and `tokenUuid` and say nothing
// of the combat's `active` (the relay asks the module for the combat, see
// completeCombat); it tells a round change from a turn change only by the
// round (see worldEvents.lastRound). What cannot be rebuilt is missing:
// its scene channel has no `scene-update`, and its hooks are a fixed list
// (§7.2).

// linkedEvent is one event of a linked world: its payloads and what the
// channel filters and the read rules look at.
type linkedEvent struct {
	// Event carries the sequence number, our name and the GM payload.
	world.Event
	channel world.EventChannel
	// filter is the value a subscription's filter compares (the hook
	// name, encounter id, actor uuid or scene id).
	filter string
	// player, when set, replaces the GM payload for readers at OBSERVER
	// or OWNER who are not GMs (GM-only details removed); limited is the
	// payload for LIMITED readers, who get nothing when it is nil.
	player, limited json.RawMessage
	// gmOnly events reach GMs only.
	gmOnly bool
	// noPlayerView is set when the relay cannot tell what a player may
	// see of the payload (combatants without their `hidden` flag): only
	// GMs get the event, and every other reader's miss is counted.
	noPlayerView bool
	// accessType and access are the top-level document the event is
	// about, reduced to the fields that decide a reader's level, as the
	// relay knew it when the event came; access is nil when the relay did
	// not know it, and then only GMs get the event.
	accessType string
	access     world.Document
	// accessUUID is the uuid of that document, when the relay knows it.
	accessUUID string
	// combat, for a combat event, is what its payloads are rebuilt from
	// once the relay has the combat's document (see completeCombat).
	combat *combatParts
	// parts are the places in the payloads that hold another document's
	// data (an unlinked token's `delta` belongs to its actor): they are
	// removed for readers below OBSERVER on that document.
	parts []part
}

// part is data of another document in an event's payloads.
type part struct {
	// owner is the access document of the actor the data belongs to; nil
	// when the relay does not know it (the part is then removed for every
	// reader but GMs).
	owner world.Document
	// ownerUUID is the uuid of that actor, when the payload names it.
	ownerUUID string
	// path leads from the payload's root to the object holding keys.
	path []string
	keys []string
	// required: a payload left with an empty object there is not sent.
	required bool
}

// accessFields are the fields of a top-level document that decide a
// reader's level on it (see world.LevelOf).
var accessFields = []string{"_id", "ownership", "author", "user", "whisper", "blind"}

// accessOf keeps the fields of doc that decide a reader's level.
func accessOf(doc map[string]any) world.Document {
	out := world.Document{}
	for _, k := range accessFields {
		if v, ok := doc[k]; ok {
			out[k] = v
		}
	}
	return out
}

// ownedTypes are the document types whose level comes from their
// `ownership`: a payload of one of them without it does not say who may
// read it.
var ownedTypes = []string{"Actor", "Item", "Scene", "JournalEntry", "Macro", "Playlist", "RollTable", "Cards", "Adventure"}

// embeddedTypes are the types that live only inside another document
// (Item lives in both places).
var embeddedTypes = map[string]bool{"Token": true, "Combatant": true, "ActiveEffect": true, "PlaylistSound": true,
	"JournalEntryPage": true, "AmbientLight": true, "Wall": true, "Tile": true, "Drawing": true, "Note": true,
	"MeasuredTemplate": true, "AmbientSound": true, "Region": true, "TableResult": true, "Card": true}

// topOf returns the type and uuid of the top-level document holding uuid.
func topOf(uuid string) (string, string) {
	parts := strings.SplitN(uuid, ".", 3)
	if len(parts) < 2 {
		return "", ""
	}
	return parts[0], parts[0] + "." + parts[1]
}

// translator rebuilds one message's event with what the relay knows of
// the world's documents (w, whose lock is held).
type translator struct {
	w *worldEvents
}

// translate reads a module event message (reference §7): its channel, our
// event name and payloads, the filter field the module nests under `data`
// (§7.7) and what decides who may read it. Messages of channels the relay
// does not stream (rolls and chat) and malformed ones are dropped.
func (t translator) translate(ev Event) (linkedEvent, bool) {
	var outer struct {
		Data map[string]any `json:"data"`
	}
	if json.Unmarshal(ev.Message, &outer) != nil || outer.Data == nil {
		return linkedEvent{}, false
	}
	d := outer.Data
	var le linkedEvent
	var ok bool
	switch ev.Type {
	case "hook-event":
		le, ok = t.hook(d)
		le.channel, le.filter = world.ChannelHooks, str(d["hook"])
	case "combat-event":
		le, ok = t.combat(d)
		le.channel, le.filter = world.ChannelCombat, str(d["encounterId"])
	case "actor-event":
		le, ok = t.actor(d)
		le.channel, le.filter = world.ChannelActor, str(d["actorUuid"])
	case "scene-event":
		le, ok = t.scene(d)
		le.channel, le.filter = world.ChannelScene, str(d["sceneId"])
	}
	if !ok || le.Name == "" || le.Data == nil {
		return linkedEvent{}, false
	}
	return le, true
}

// set encodes the payloads; player and limited may be nil.
func (le *linkedEvent) set(name string, full, player, limited map[string]any) {
	le.Name = name
	le.Data = encodeMap(full)
	if player != nil {
		le.player = encodeMap(player)
	}
	if limited != nil {
		le.limited = encodeMap(limited)
	}
}

// encodeMap writes a payload built from JSON values.
func encodeMap(m map[string]any) json.RawMessage {
	b, err := world.EncodeJSON(m)
	if err != nil {
		return nil
	}
	return b
}

// know returns the access document the relay keeps for a top-level uuid,
// or nil.
func (t translator) know(uuid string) world.Document { return t.w.known.get(uuid) }

// hook rebuilds a hook event: `{hook, args}` with, for document hooks,
// args[0] the document as the tabletop stores it, the changes next (for
// update hooks) and then the operation's options, whose `parentUuid`
// places an embedded document.
func (t translator) hook(d map[string]any) (linkedEvent, bool) {
	name := str(d["hook"])
	args, _ := d["args"].([]any)
	arg := func(i int) map[string]any {
		if i < len(args) {
			m, _ := args[i].(map[string]any)
			return m
		}
		return nil
	}
	var le linkedEvent
	switch name {
	case "":
		return le, false
	case "combatStart", "combatRound", "combatTurn":
		combat := t.w.withCombatantActors(arg(0))
		id := str(combat["_id"])
		if id == "" {
			return le, false
		}
		uuid := "Combat." + id
		le.set(name, events.CombatState(uuid, combat, false), events.CombatState(uuid, combat, true), nil)
		le.accessType, le.access, le.accessUUID = "Combat", accessOf(combat), uuid
		return le, true
	}
	var verb string
	for _, v := range []string{"create", "update", "delete"} {
		if strings.HasPrefix(name, v) && len(name) > len(v) && name[len(v)] >= 'A' && name[len(v)] <= 'Z' {
			verb = v
		}
	}
	doc := arg(0)
	if verb == "" || doc == nil {
		// A hook about no document (updateWorldTime, pauseGame,
		// canvasReady): its arguments as the module sent them, for GMs.
		le.set(name, d, nil, nil)
		le.gmOnly = true
		return le, true
	}
	docName := name[len(verb):]
	switch docName {
	case "Combatant":
		doc = t.w.withTokenActor(doc, "")
	case "Combat":
		doc = t.w.withCombatantActors(doc)
	}
	id := str(doc["_id"])
	optionsAt := 1
	if verb == "update" {
		optionsAt = 2
	}
	parent := parentOf(docName, arg(optionsAt))
	uuid := docName + "." + id
	if parent != "" {
		uuid = parent + "." + uuid
	}
	base := map[string]any{"uuid": uuid, "documentName": docName, "parentUuid": parent}
	full, limited := maps.Clone(base), maps.Clone(base)
	var player map[string]any
	switch verb {
	case "create":
		full["data"] = events.FullDoc(uuid, doc)
		limited["data"] = events.LimitedDoc(docName, uuid, doc)
		if docName == "Combat" {
			player = maps.Clone(full)
			player["data"] = events.PlayerCombatDoc(uuid, doc)
		}
	case "update":
		changes := cleanChanges(arg(1), events.EmbeddedKeys(docName))
		if len(changes) == 0 {
			return le, false
		}
		full["changes"] = changes
		if lc := events.LimitedChanges(changes); lc != nil {
			limited["changes"] = lc
		} else {
			limited = nil
		}
	case "delete":
		full["id"], full["name"] = id, doc["name"]
		limited = maps.Clone(full)
	}
	le.set(name, full, player, limited)
	if docName == "Token" && verb != "delete" && strings.HasPrefix(parent, "Scene.") && id != "" {
		if _, ok := doc["actorId"]; ok {
			t.w.noteTokenActor(uuid, str(doc["actorId"]))
		}
	}
	le.gmOnly = docName == "Combatant" && doc["hidden"] == true
	if docName == "Combatant" && verb != "delete" && strings.HasPrefix(parent, "Combat.") && id != "" {
		// The combatant as it is now, for the combat events to come
		// (kept after a deletion, for the event of its removal).
		t.w.noteCombatant(strings.TrimPrefix(parent, "Combat."), doc)
	}
	switch {
	case id == "" || parent == "" && embeddedTypes[docName]:
		// The document cannot be placed: GMs only.
		le.access = nil
	case parent == "":
		le.accessType = docName
		if verb != "delete" {
			// A deleted document cannot be asked about any more.
			le.accessUUID = uuid
		}
		if slices.Contains(ownedTypes, docName) && doc["ownership"] == nil {
			le.access = t.know(uuid)
		} else {
			le.access = accessOf(doc)
		}
		if verb == "delete" {
			t.w.known.forget(uuid)
		} else if doc["ownership"] != nil {
			t.w.known.put(uuid, le.access)
		}
	default:
		le.accessType, le.accessUUID = topOf(parent)
		le.access = t.know(le.accessUUID)
		if le.accessType == "Combat" {
			// A combat's level is the same for every player (it has
			// no ownership): nothing to learn.
			le.access = world.Document{"_id": strings.TrimPrefix(le.accessUUID, "Combat.")}
		}
	}
	switch {
	case docName == "Token" && verb == "create":
		le.parts = t.deltaParts(doc, false, "data")
	case docName == "Token" && verb == "update":
		le.parts = t.deltaParts(doc, true, "changes")
	case docName == "Scene" && verb == "create":
		tokens, _ := doc["tokens"].([]any)
		for i, tk := range tokens {
			token, _ := tk.(map[string]any)
			le.parts = append(le.parts, t.deltaParts(token, false, "data", "tokens", strconv.Itoa(i))...)
		}
	}
	return le, true
}

// parentTypes names, for each kind of embedded document, the kind of
// document its hooks' parent is, when there is only one.
var parentTypes = map[string]string{"Item": "Actor", "Token": "Scene", "Combatant": "Combat", "PlaylistSound": "Playlist",
	"JournalEntryPage": "JournalEntry", "AmbientLight": "Scene", "AmbientSound": "Scene", "Wall": "Scene", "Tile": "Scene",
	"Drawing": "Scene", "Note": "Scene", "MeasuredTemplate": "Scene", "Region": "Scene", "TableResult": "RollTable", "Card": "Cards"}

// parentOf is the uuid of the document that holds an embedded document,
// from its hook's options: their `parentUuid`, or else their `parent`,
// the parent document itself as the module serialises it (its source
// data, with its `_id` but not its kind). The tabletop's hooks carry
// `parent` and no `parentUuid` for the changes made in the browser that
// runs the module, which are the changes made through the relay. The
// kind of parent follows from the document's kind; an effect's parent is
// an actor when it looks like one (an item's effect stays unplaced: the
// item's own actor is not in the options). "" for a world document, or
// one the options do not place.
func parentOf(docName string, options map[string]any) string {
	if uuid := str(options["parentUuid"]); uuid != "" {
		return uuid
	}
	parent := asMap(options["parent"])
	id := str(parent["_id"])
	if id == "" || strings.ContainsAny(id, ". ") {
		return ""
	}
	kind := parentTypes[docName]
	if docName == "ActiveEffect" {
		if _, ok := parent["prototypeToken"]; ok {
			kind = "Actor"
		}
	}
	if kind == "" {
		return ""
	}
	return kind + "." + id
}

// deltaParts returns the part of a payload that holds a token's `delta`
// (an unlinked token's changes to its actor's data), if it has one: the
// whole token at path, or its changes (update) there.
func (t translator) deltaParts(token map[string]any, update bool, path ...string) []part {
	if token == nil {
		return nil
	}
	p := part{path: path, keys: []string{"delta"}}
	if update {
		p.keys, p.required = []string{"delta", "-=delta"}, true
	} else if _, ok := token["delta"]; !ok {
		return nil
	}
	if actor := str(token["actorId"]); actor != "" {
		p.ownerUUID = "Actor." + actor
		p.owner = t.know(p.ownerUUID)
	}
	return []part{p}
}

// withOwnership returns access with an update's ownership changes applied
// (keys set, `-=key` removed), leaving access itself as it was.
func withOwnership(access world.Document, changes map[string]any) world.Document {
	out := maps.Clone(access)
	own := maps.Clone(asMap(out["ownership"]))
	if own == nil {
		own = map[string]any{}
	}
	for k, v := range changes {
		if after, ok := strings.CutPrefix(k, "-="); ok {
			delete(own, after)
			continue
		}
		own[k] = v
	}
	out["ownership"] = own
	return out
}

// cleanChanges is an update's changes as the relay reports them: without
// the document's `_id` (the module's changes repeat it), its bookkeeping
// (`_stats`) and its embedded collections, which report their own changes.
func cleanChanges(changes map[string]any, embedded []string) map[string]any {
	out := map[string]any{}
	for k, v := range changes {
		if k == "_id" || k == "_stats" || slices.Contains(embedded, k) {
			continue
		}
		out[k] = v
	}
	return out
}

// actor rebuilds an actor event: `{actorUuid, eventType, …}` (§7.4).
func (t translator) actor(d map[string]any) (linkedEvent, bool) {
	var le linkedEvent
	actorUUID, kind := str(d["actorUuid"]), str(d["eventType"])
	if actorUUID == "" || kind == "" {
		return le, false
	}
	le.accessType, le.access = "Actor", nil
	if typ, top := topOf(actorUUID); top != "" {
		le.accessType, le.access, le.accessUUID = typ, t.know(top), top
	}
	base := map[string]any{"actorUuid": actorUUID, "uuid": actorUUID}
	name := "actor-" + kind
	embeddedDoc := func(docName, idKey, docKey string) (string, map[string]any) {
		doc, _ := d[docKey].(map[string]any)
		id := str(d[idKey])
		if id == "" {
			id = str(doc["_id"])
		}
		return actorUUID + "." + docName + "." + id, doc
	}
	switch kind {
	case "update":
		changes := cleanChanges(asMap(d["changes"]), events.EmbeddedKeys("Actor"))
		if len(changes) == 0 {
			return le, false
		}
		if own := asMap(changes["ownership"]); own != nil && le.access != nil && le.accessUUID == actorUUID {
			// The event is judged by the actor as the change left it.
			le.access = withOwnership(le.access, own)
			t.w.known.put(actorUUID, le.access)
		}
		var limited map[string]any
		if lc := events.LimitedChanges(changes); lc != nil {
			limited = with(base, "changes", lc)
		}
		le.set(name, with(base, "changes", changes), nil, limited)
	case "item-add", "effect-add":
		docName, idKey, docKey := "Item", "itemId", "item"
		if kind == "effect-add" {
			docName, idKey, docKey = "ActiveEffect", "effectId", "effect"
		}
		uuid, doc := embeddedDoc(docName, idKey, docKey)
		if doc == nil {
			return le, false
		}
		le.set(name, with(base, "uuid", uuid, idKey, str(doc["_id"]), docKey, events.FullDoc(uuid, doc)), nil,
			with(base, "uuid", uuid, idKey, str(doc["_id"]), docKey, events.LimitedDoc(docName, uuid, doc)))
	case "item-update":
		uuid, _ := embeddedDoc("Item", "itemId", "")
		changes := cleanChanges(asMap(d["changes"]), events.EmbeddedKeys("Item"))
		full := with(base, "uuid", uuid, "itemId", d["itemId"], "itemName", d["itemName"], "changes", changes)
		var limited map[string]any
		if lc := events.LimitedChanges(changes); lc != nil {
			limited = with(full, "changes", lc)
		}
		le.set(name, full, nil, limited)
	case "item-remove":
		uuid, _ := embeddedDoc("Item", "itemId", "")
		full := with(base, "uuid", uuid, "itemId", d["itemId"], "itemName", d["itemName"])
		le.set(name, full, nil, full)
	case "effect-remove":
		uuid, _ := embeddedDoc("ActiveEffect", "effectId", "")
		full := with(base, "uuid", uuid, "effectId", d["effectId"], "effectName", d["effectName"])
		le.set(name, full, nil, full)
	default:
		// A kind this relay does not know: as the module sent it, for GMs.
		le.set(name, with(without(d, "eventType"), "uuid", actorUUID), nil, nil)
		le.gmOnly = true
	}
	return le, true
}

// scene rebuilds a scene event: `{sceneId, eventType, …}` (§7.5).
func (t translator) scene(d map[string]any) (linkedEvent, bool) {
	var le linkedEvent
	sceneID, kind := str(d["sceneId"]), str(d["eventType"])
	if sceneID == "" || kind == "" {
		return le, false
	}
	sceneUUID := "Scene." + sceneID
	le.accessType, le.access, le.accessUUID = "Scene", t.know(sceneUUID), sceneUUID
	base := map[string]any{"sceneId": sceneID, "uuid": sceneUUID}
	name := "scene-" + strings.TrimPrefix(kind, "scene-")
	tokenID := str(d["tokenId"])
	switch kind {
	case "token-create":
		token := asMap(d["token"])
		if token == nil {
			return le, false
		}
		tokenID = str(token["_id"])
		uuid := sceneUUID + ".Token." + tokenID
		le.set(name, with(base, "uuid", uuid, "tokenId", tokenID, "token", events.FullDoc(uuid, token)), nil,
			with(base, "uuid", uuid, "tokenId", tokenID, "token", events.LimitedDoc("Token", uuid, token)))
		le.parts = t.deltaParts(token, false, "token")
	case "token-update":
		changes := cleanChanges(asMap(d["changes"]), nil)
		full := with(base, "uuid", sceneUUID+".Token."+tokenID, "tokenId", tokenID, "changes", changes)
		var limited map[string]any
		if lc := events.LimitedChanges(changes); lc != nil {
			limited = with(full, "changes", lc)
		}
		le.set(name, full, nil, limited)
		// The module's update names no actor: a changed delta is
		// removed for every reader but GMs.
		le.parts = t.deltaParts(map[string]any{}, true, "changes")
	case "token-delete":
		full := with(base, "uuid", sceneUUID+".Token."+tokenID, "tokenId", tokenID, "tokenName", d["tokenName"])
		le.set(name, full, nil, full)
	case "scene-activate":
		full := with(base, "name", d["name"])
		le.set(name, full, nil, full)
	default:
		// Lights, walls and the kinds this relay does not know: as the
		// module sent them, without the limited payload.
		le.set(name, with(without(d, "eventType"), "uuid", sceneUUID), nil, nil)
	}
	return le, true
}

// combat rebuilds a combat event: `{eventType, encounterId, …}` (§7.3).
// The module's combatants carry no `hidden` flag, so what a player may see
// of a combat's list is unknown until the relay has the combat (see
// completeCombat); until then those events reach GMs only. The module
// reports a turn and a round change alike (`turn`): the relay tells them
// apart by the round it saw last for the combat.
func (t translator) combat(d map[string]any) (linkedEvent, bool) {
	var le linkedEvent
	id, kind := str(d["encounterId"]), str(d["eventType"])
	if id == "" || kind == "" {
		return le, false
	}
	uuid := "Combat." + id
	le.accessType, le.access = "Combat", world.Document{"_id": id}
	summaries := func() []any {
		list, _ := d["combatants"].([]any)
		out := make([]any, 0, len(list))
		for _, c := range list {
			out = append(out, moduleCombatant(uuid, asMap(c)))
		}
		return out
	}
	switch kind {
	case "start", "turn":
		name := "combat-start"
		round, seen := t.w.lastRound[id]
		if kind == "turn" {
			name = "combat-turn"
			if seen && !sameJSON(round, d["round"]) {
				name = "combat-round"
			}
		}
		t.w.noteRound(id, d["round"])
		full := map[string]any{"encounterId": id, "uuid": uuid, "round": numberOr(d["round"]), "turn": numberOr(d["turn"]),
			"started": d["started"] == true, "combatants": summaries()}
		le.set(name, full, nil, nil)
		le.noPlayerView = true
		le.combat = &combatParts{id: id, payload: full}
	case "end":
		delete(t.w.lastRound, id)
		delete(t.w.combatants, id)
		le.set("combat-end", map[string]any{"encounterId": id, "uuid": uuid, "round": numberOr(d["round"])}, nil, nil)
	case "combatant-add", "combatant-remove":
		c := moduleCombatant(uuid, asMap(d["combatant"]))
		full := map[string]any{"encounterId": id, "uuid": c["uuid"], "combatant": c}
		le.set("combat-"+kind, full, nil, nil)
		le.noPlayerView = true
		le.combat = &combatParts{id: id, payload: full, one: true}
	default:
		le.set("combat-"+kind, with(without(d, "eventType"), "uuid", uuid), nil, nil)
		le.gmOnly = true
	}
	return le, true
}

// combatParts is a combat event's payload as rebuilt from the module's
// message, waiting for what the combat's document adds.
type combatParts struct {
	id      string
	payload map[string]any
	// one: the payload is about one combatant (`combatant`), not the
	// combat's state (`combatants`).
	one bool
}

// completeCombat adds to a combat event what the module's message lacks
// and the combat's document has: each combatant's `hidden`, `actorUuid`
// and `tokenUuid` (from the combatants the relay saw last, in combatant
// hooks or in the combat the module gave, kept in w, so a removed one is
// still known), and the combat's `active` when doc, the combat as the
// module just gave it, is not nil. The module gives the combat as it is
// when asked, just after the event: a combatant hidden or shown in that
// moment is judged as it is then. With every combatant
// known, the event gets its players' payload: the hidden combatants left
// out, and an event about a hidden one for GMs only.
func (le *linkedEvent) completeCombat(w *worldEvents, doc world.Document) {
	cp := le.combat
	uuid := "Combat." + cp.id
	if doc != nil {
		scene, _ := doc["scene"].(string)
		list, _ := doc["combatants"].([]any)
		for _, c := range list {
			if cb := asMap(c); str(cb["_id"]) != "" {
				if cb["sceneId"] == nil && scene != "" {
					cb = with(cb, "sceneId", scene)
				}
				w.noteCombatant(cp.id, w.withTokenActor(cb, scene))
			}
		}
	}
	known := w.combatants[cp.id]
	complete := func(s map[string]any) (map[string]any, bool) {
		cb := known[str(s["id"])]
		if cb == nil {
			return s, false
		}
		out := events.CombatantSummary(uuid, "", cb)
		for _, k := range []string{"id", "uuid", "name", "initiative", "defeated"} {
			out[k] = s[k]
		}
		return out, true
	}
	if cp.one {
		c, ok := complete(asMap(cp.payload["combatant"]))
		if !ok {
			return
		}
		full := with(cp.payload, "combatant", c)
		le.Data = encodeMap(full)
		le.gmOnly, le.noPlayerView = c["hidden"] == true, false
		return
	}
	list, _ := cp.payload["combatants"].([]any)
	all, visible, resolved := make([]any, 0, len(list)), make([]any, 0, len(list)), true
	for _, s := range list {
		c, ok := complete(asMap(s))
		resolved = resolved && ok
		all = append(all, c)
		if c["hidden"] != true {
			visible = append(visible, c)
		}
	}
	full := with(cp.payload, "combatants", all)
	if doc != nil {
		full["active"] = doc["active"] == true
	}
	le.Data = encodeMap(full)
	if resolved {
		le.player = encodeMap(with(full, "combatants", visible))
		le.noPlayerView = false
	}
}

// noteCombatant records a combatant of a combat as the relay saw it last.
func (w *worldEvents) noteCombatant(combatID string, cb map[string]any) {
	known := w.combatants[combatID]
	if known == nil {
		if len(w.combatants) >= 256 {
			clear(w.combatants)
		}
		if w.combatants == nil {
			w.combatants = map[string]map[string]world.Document{}
		}
		known = map[string]world.Document{}
		w.combatants[combatID] = known
	}
	id := str(cb["_id"])
	if _, ok := known[id]; !ok && len(known) >= maxCombatants {
		// A tabletop that names ever new combatants must not grow the
		// relay's memory: start the combat's table afresh (its events
		// then reach players once the relay saw them again).
		clear(known)
	}
	known[id] = cb
}

// maxCombatants bounds the combatants the relay remembers of one combat,
// far above any real encounter.
const maxCombatants = 1024

// moduleCombatant is a combatant of a module's combat event in the
// relay's shape, with what the module sends of it (`{id, name,
// initiative, defeated, uuid}`).
func moduleCombatant(combatUUID string, c map[string]any) map[string]any {
	id := str(c["id"])
	uuid := str(c["uuid"])
	if uuid == "" {
		uuid = combatUUID + ".Combatant." + id
	}
	return map[string]any{"id": id, "uuid": uuid, "name": c["name"], "initiative": c["initiative"], "defeated": c["defeated"] == true}
}

// viewFor returns what user may receive of le (nil for nothing), and
// whether the relay could not decide (the reader is not a GM and the relay
// knows too little of the document): such a miss is counted.
func (le *linkedEvent) viewFor(user *world.User) (json.RawMessage, bool) {
	if user.IsGM() {
		return le.Data, false
	}
	if le.gmOnly {
		return nil, false
	}
	if le.access == nil {
		return nil, true
	}
	level := world.LevelOf(user, le.accessType, le.access)
	var data json.RawMessage
	switch level {
	case world.LevelNone:
		return nil, false
	case world.LevelLimited:
		data = le.limited
	default:
		if le.noPlayerView {
			return nil, true
		}
		data = le.Data
		if le.player != nil {
			data = le.player
		}
	}
	if data == nil {
		return nil, false
	}
	var hidden []part
	for _, p := range le.parts {
		if p.owner == nil || world.LevelOf(user, "Actor", p.owner) < world.LevelObserver {
			hidden = append(hidden, p)
		}
	}
	if len(hidden) == 0 {
		return data, false
	}
	return stripParts(data, hidden), false
}

// stripParts returns data without the hidden parts; nil when nothing worth
// sending is left or data cannot be read.
func stripParts(data json.RawMessage, hidden []part) json.RawMessage {
	var root any
	if json.Unmarshal(data, &root) != nil {
		return nil
	}
	for _, p := range hidden {
		obj := follow(root, p.path)
		if obj == nil {
			continue
		}
		had := len(obj) > 0
		found := false
		for _, k := range p.keys {
			_, ok := obj[k]
			found = found || ok
			delete(obj, k)
		}
		if p.required && !found {
			continue
		}
		if p.required && had && len(obj) == 0 {
			return nil
		}
	}
	out, err := world.EncodeJSON(root)
	if err != nil {
		return nil
	}
	return out
}

// follow walks path (object keys and array indexes) from v to an object.
func follow(v any, path []string) map[string]any {
	for _, step := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[step]
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	m, _ := v.(map[string]any)
	return m
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

// numberOr returns a JSON number, or 0 for anything else.
func numberOr(v any) any {
	if f, ok := v.(float64); ok {
		return f
	}
	return 0.0
}

// sameJSON compares two decoded JSON scalars.
func sameJSON(a, b any) bool { return a == b }

// with returns a copy of m with extra key, value pairs set.
func with(m map[string]any, kv ...any) map[string]any {
	out := maps.Clone(m)
	if out == nil {
		out = map[string]any{}
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// without returns a copy of m without the keys.
func without(m map[string]any, keys ...string) map[string]any {
	out := maps.Clone(m)
	for _, k := range keys {
		delete(out, k)
	}
	return out
}

// footprint estimates the memory a retained event holds, for the ring's
// byte budget: its payloads, what decides who may read it, and a fixed
// overhead.
func (le *linkedEvent) footprint() int64 {
	n := 256 + len(le.Data) + len(le.player) + len(le.limited) + len(le.Name) + len(le.filter) + 64*len(le.access)
	for _, p := range le.parts {
		n += 128 + 64*len(p.owner) + 32*(len(p.path)+len(p.keys))
	}
	return int64(n)
}
