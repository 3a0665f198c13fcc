package events

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// The channels events are published on: one per subscribe endpoint.
const (
	ChannelHooks  = world.ChannelHooks
	ChannelCombat = world.ChannelCombat
	ChannelActor  = world.ChannelActor
	ChannelScene  = world.ChannelScene
)

// Channel names a stream of events: the world's [world.EventChannel].
type Channel = world.EventChannel

// event is one published event as the hub keeps it (in memory and, encoded,
// in the world's journal): its payloads for each kind of reader and what
// decides who may read it.
type event struct {
	Seq     uint64  `json:"seq"`
	Channel Channel `json:"ch"`
	Name    string  `json:"name"`
	// Key is what the channel's filter compares: the actor uuid (actor
	// channel), the scene id (scene channel) or the combat id (combat
	// channel).
	Key string `json:"key,omitempty"`
	// Access is the top-level document the event is about, reduced to the
	// fields that decide a user's level, as it was at the time of the event.
	Access access `json:"acc"`
	// Full is the payload for GMs; Player, when set, replaces it for other
	// readers at OBSERVER or OWNER (GM-only details removed); Limited is the
	// payload for LIMITED readers, who get nothing when it is nil.
	Full    json.RawMessage `json:"full"`
	Player  json.RawMessage `json:"player,omitempty"`
	Limited json.RawMessage `json:"limited,omitempty"`
	// GMOnly events reach GMs only (a hidden combatant).
	GMOnly bool `json:"gm,omitempty"`
	// Embeds are the other documents whose data the payloads carry, each
	// with what a reader must hold on it (see embed).
	Embeds []embed `json:"emb,omitempty"`
	// Format is the version of the hub that built the event: events
	// loaded from an older journal may carry other documents' data
	// without saying so (see event.loaded).
	Format int `json:"v,omitempty"`

	// variants are the payloads with parts removed for readers who may
	// not see some of the embedded documents, each made once and shared
	// by every reader who receives it (see event.variant).
	vmu      sync.Mutex
	variants map[variantKey]*variant
}

// eventFormat is the Format of the events this hub builds: 2 since events
// declare the other documents their payloads carry.
const eventFormat = 2

// access is what a reader's level on an event is computed from.
type access struct {
	Type string         `json:"type"`
	Doc  world.Document `json:"doc"`
}

// accessFields are the fields of a top-level document that decide a
// user's level on it (see world.LevelOf).
var accessFields = []string{"_id", "ownership", "author", "user", "whisper", "blind"}

func accessOf(typ string, top world.Document) access {
	doc := world.Document{}
	for _, k := range accessFields {
		if v, ok := top[k]; ok {
			doc[k] = v
		}
	}
	return access{Type: typ, Doc: doc}
}

// embeddedKeys are the fields holding embedded documents, by document
// name: they are reported as changes of their own, never as fields.
var embeddedKeys = map[string][]string{
	"Actor":        {"items", "effects"},
	"Item":         {"effects"},
	"Scene":        {"tokens"},
	"JournalEntry": {"pages"},
	"Combat":       {"combatants"},
}

// limitedKeys are what a LIMITED reader sees of a document.
var limitedKeys = []string{"name", "img"}

// builder turns the changes of one transaction into events.
type builder struct {
	changes map[string]*world.Change // every change of the transaction, by uuid
	// state is the world as the transaction left it, where the documents
	// a change refers to are looked up; nil when unknown.
	state *world.View
	out   []*event
}

// buildEvents returns the events of one transaction's changes, in order,
// without sequence numbers. state is the world as the transaction left it
// (nil when unknown: a document the changes refer to is then NONE to every
// reader but GMs).
func buildEvents(changes []world.Change, state *world.View) []*event {
	b := &builder{changes: make(map[string]*world.Change, len(changes)), state: state}
	for i := range changes {
		b.changes[changes[i].UUID] = &changes[i]
	}
	for i := range changes {
		b.change(&changes[i])
	}
	return b.out
}

// uuidPath is a parsed uuid: document names and ids, top-level first.
type uuidPath []struct{ name, id string }

func parsePath(uuid string) uuidPath {
	parts := strings.Split(uuid, ".")
	if len(parts) < 2 || len(parts)%2 != 0 {
		return nil
	}
	p := make(uuidPath, 0, len(parts)/2)
	for i := 0; i < len(parts); i += 2 {
		p = append(p, struct{ name, id string }{parts[i], parts[i+1]})
	}
	return p
}

// uuidOf returns the uuid of the first n steps of the path.
func (p uuidPath) uuidOf(n int) string {
	var sb strings.Builder
	for i := range n {
		if i > 0 {
			sb.WriteByte('.')
		}
		sb.WriteString(p[i].name + "." + p[i].id)
	}
	return sb.String()
}

// change adds the events of one change.
func (b *builder) change(c *world.Change) {
	path := parsePath(c.UUID)
	if path == nil {
		return
	}
	// Creating or deleting a document creates or deletes its embedded
	// documents with it; like the tabletop, report only the document.
	for n := 1; n < len(path); n++ {
		if a := b.changes[path.uuidOf(n)]; a != nil && a.Op != world.ChangeUpdate {
			return
		}
	}
	top := b.topDoc(c, path)
	if top == nil {
		return
	}
	e := &changeEvents{b: b, c: c, path: path, acc: accessOf(path[0].name, top)}
	e.doc = c.After
	if c.Op == world.ChangeDelete {
		e.doc = c.Before
	}
	if c.Op == world.ChangeUpdate {
		e.changes = diff(c.Before, c.After, embeddedKeys[c.DocumentName])
		if len(e.changes) == 0 {
			return // only embedded documents changed: they report themselves
		}
	}
	e.hooks()
	switch path[0].name {
	case "Actor":
		e.actor()
	case "Scene":
		e.scene()
	case "Combat":
		e.combat()
	}
}

// topDoc returns the top-level document a change lives in, as it was at
// the time of the change: after it, or before it for a deletion of the
// document itself (embedded deletions inside a deleted document are not
// reported).
func (b *builder) topDoc(c *world.Change, path uuidPath) world.Document {
	t := c
	if len(path) > 1 {
		if t = b.changes[path.uuidOf(1)]; t == nil {
			return nil
		}
	}
	if t.After != nil {
		return t.After
	}
	return t.Before
}

// changeEvents builds the events of one change.
type changeEvents struct {
	b       *builder
	c       *world.Change
	path    uuidPath
	acc     access
	doc     world.Document // after, or before for a deletion
	changes map[string]any // own fields changed, for an update
}

// add appends an event; limited may be nil (nothing for LIMITED readers)
// and player nil (the same as full). embeds are the other documents whose
// data the payloads carry.
func (e *changeEvents) add(ch Channel, name, key string, full, player, limited map[string]any, gmOnly bool, embeds ...embed) {
	ev := &event{Channel: ch, Name: name, Key: key, Access: e.acc, GMOnly: gmOnly, Embeds: embeds, Format: eventFormat}
	ev.Full = encode(full)
	if player != nil {
		ev.Player = encode(player)
	}
	if limited != nil {
		ev.Limited = encode(limited)
	}
	e.b.out = append(e.b.out, ev)
}

// verb is the hook prefix of the change's kind.
func (e *changeEvents) verb() string {
	switch e.c.Op {
	case world.ChangeCreate:
		return "create"
	case world.ChangeDelete:
		return "delete"
	}
	return "update"
}

// parentUUID is the uuid of the document holding this one, or "".
func (e *changeEvents) parentUUID() string {
	if len(e.path) < 2 {
		return ""
	}
	return e.path.uuidOf(len(e.path) - 1)
}

// hooks adds the tabletop hook of the change (createActor, updateToken,
// deleteCombatant, ...) and, for combats, combatStart, combatRound and
// combatTurn.
func (e *changeEvents) hooks() {
	c := e.c
	base := map[string]any{"uuid": c.UUID, "documentName": c.DocumentName, "parentUuid": e.parentUUID()}
	full, player, limited := with(base), map[string]any(nil), with(base)
	switch c.Op {
	case world.ChangeCreate:
		full["data"] = fullDoc(c.UUID, c.After)
		limited["data"] = limitedDoc(c.DocumentName, c.UUID, c.After)
		if c.DocumentName == "Combat" {
			player = with(full)
			player["data"] = playerCombatDoc(c.UUID, c.After)
		}
	case world.ChangeUpdate:
		full["changes"] = e.changes
		if lc := limitedChanges(e.changes); lc != nil {
			limited["changes"] = lc
		} else {
			limited = nil
		}
	case world.ChangeDelete:
		full["id"] = e.path[len(e.path)-1].id
		full["name"] = e.doc["name"]
		limited = with(full)
	}
	gmOnly := c.DocumentName == "Combatant" && isHidden(e.doc)
	e.add(ChannelHooks, e.verb()+c.DocumentName, "", full, player, limited, gmOnly, e.hookEmbeds()...)
	if c.DocumentName == "Combat" {
		if name := combatStep(c); name != "" {
			state := combatState(c.UUID, e.doc, false)
			e.add(ChannelHooks, name, "", state, combatState(c.UUID, e.doc, true), nil, false)
		}
	}
}

// hookEmbeds are the other documents whose data the change's hook carries:
// a chat message's speaker and targets, a token's actor (its `delta`), the
// actors of a new scene's tokens.
func (e *changeEvents) hookEmbeds() []embed {
	c := e.c
	switch c.DocumentName {
	case "ChatMessage":
		return e.b.chatEmbeds(e.doc)
	case "Token":
		switch c.Op {
		case world.ChangeCreate:
			return e.b.tokenEmbeds(e.doc, nil, "data")
		case world.ChangeUpdate:
			return e.b.tokenEmbeds(e.doc, e.changes, "changes")
		}
	case "Scene":
		if c.Op == world.ChangeCreate {
			return e.b.sceneEmbeds(e.doc, "data")
		}
	}
	return nil
}

// combatStep names the combat hook of a combat change: combatStart when it
// starts, else combatRound when the round moves, else combatTurn when the
// turn moves; "" for anything else.
func combatStep(c *world.Change) string {
	if c.Op == world.ChangeDelete {
		return ""
	}
	if c.After["started"] != true {
		return ""
	}
	if c.Op == world.ChangeCreate || c.Before["started"] != true {
		return "combatStart"
	}
	if !reflect.DeepEqual(c.Before["round"], c.After["round"]) {
		return "combatRound"
	}
	if !reflect.DeepEqual(c.Before["turn"], c.After["turn"]) {
		return "combatTurn"
	}
	return ""
}

// actor adds the actor channel's events: actor-update, actor-item-add,
// actor-item-update, actor-item-remove, actor-effect-add and
// actor-effect-remove.
func (e *changeEvents) actor() {
	c, actorUUID := e.c, e.path.uuidOf(1)
	base := map[string]any{"actorUuid": actorUUID, "uuid": c.UUID}
	id := e.path[len(e.path)-1].id
	switch {
	case len(e.path) == 1 && c.Op == world.ChangeUpdate:
		full := with(base, "changes", e.changes)
		var limited map[string]any
		if lc := limitedChanges(e.changes); lc != nil {
			limited = with(base, "changes", lc)
		}
		e.add(ChannelActor, "actor-update", actorUUID, full, nil, limited, false)
	case len(e.path) == 2 && c.DocumentName == "Item":
		switch c.Op {
		case world.ChangeCreate:
			e.add(ChannelActor, "actor-item-add", actorUUID,
				with(base, "itemId", id, "item", fullDoc(c.UUID, c.After)), nil,
				with(base, "itemId", id, "item", limitedDoc("Item", c.UUID, c.After)), false)
		case world.ChangeUpdate:
			full := with(base, "itemId", id, "itemName", e.doc["name"], "changes", e.changes)
			var limited map[string]any
			if lc := limitedChanges(e.changes); lc != nil {
				limited = with(full, "changes", lc)
			}
			e.add(ChannelActor, "actor-item-update", actorUUID, full, nil, limited, false)
		case world.ChangeDelete:
			full := with(base, "itemId", id, "itemName", e.doc["name"])
			e.add(ChannelActor, "actor-item-remove", actorUUID, full, nil, full, false)
		}
	case len(e.path) == 2 && c.DocumentName == "ActiveEffect":
		switch c.Op {
		case world.ChangeCreate:
			e.add(ChannelActor, "actor-effect-add", actorUUID,
				with(base, "effectId", id, "effect", fullDoc(c.UUID, c.After)), nil,
				with(base, "effectId", id, "effect", limitedDoc("ActiveEffect", c.UUID, c.After)), false)
		case world.ChangeDelete:
			full := with(base, "effectId", id, "effectName", e.doc["name"])
			e.add(ChannelActor, "actor-effect-remove", actorUUID, full, nil, full, false)
		}
	}
}

// scene adds the scene channel's events: scene-update, scene-activate and
// scene-token-create, -update and -delete.
func (e *changeEvents) scene() {
	c, sceneID := e.c, e.path[0].id
	base := map[string]any{"sceneId": sceneID, "uuid": c.UUID}
	switch {
	case len(e.path) == 1 && c.Op == world.ChangeUpdate:
		if c.After["active"] == true && c.Before["active"] != true {
			full := with(base, "name", c.After["name"])
			e.add(ChannelScene, "scene-activate", sceneID, full, nil, full, false)
		}
		full := with(base, "changes", e.changes)
		var limited map[string]any
		if lc := limitedChanges(e.changes); lc != nil {
			limited = with(base, "changes", lc)
		}
		e.add(ChannelScene, "scene-update", sceneID, full, nil, limited, false)
	case len(e.path) == 2 && c.DocumentName == "Token":
		id := e.path[1].id
		switch c.Op {
		case world.ChangeCreate:
			e.add(ChannelScene, "scene-token-create", sceneID,
				with(base, "tokenId", id, "token", fullDoc(c.UUID, c.After)), nil,
				with(base, "tokenId", id, "token", limitedDoc("Token", c.UUID, c.After)), false,
				e.b.tokenEmbeds(e.doc, nil, "token")...)
		case world.ChangeUpdate:
			full := with(base, "tokenId", id, "changes", e.changes)
			var limited map[string]any
			if lc := limitedChanges(e.changes); lc != nil {
				limited = with(full, "changes", lc)
			}
			e.add(ChannelScene, "scene-token-update", sceneID, full, nil, limited, false, e.b.tokenEmbeds(e.doc, e.changes, "changes")...)
		case world.ChangeDelete:
			full := with(base, "tokenId", id, "tokenName", e.doc["name"])
			e.add(ChannelScene, "scene-token-delete", sceneID, full, nil, full, false)
		}
	}
}

// combat adds the combat channel's events: combat-start, combat-round,
// combat-turn, combat-end, combat-combatant-add and
// combat-combatant-remove.
func (e *changeEvents) combat() {
	c, combatID := e.c, e.path[0].id
	combatUUID := e.path.uuidOf(1)
	if len(e.path) == 1 {
		switch {
		case c.Op == world.ChangeDelete || c.Op == world.ChangeUpdate && c.Before["started"] == true && c.After["started"] != true:
			full := map[string]any{"encounterId": combatID, "uuid": combatUUID, "round": numberOr(e.doc["round"])}
			e.add(ChannelCombat, "combat-end", combatID, full, nil, nil, false)
		default:
			if step := combatStep(c); step != "" {
				name := map[string]string{"combatStart": "combat-start", "combatRound": "combat-round", "combatTurn": "combat-turn"}[step]
				e.add(ChannelCombat, name, combatID, combatState(combatUUID, e.doc, false), combatState(combatUUID, e.doc, true), nil, false)
			}
		}
		return
	}
	if len(e.path) != 2 || c.DocumentName != "Combatant" || c.Op == world.ChangeUpdate {
		return
	}
	name := "combat-combatant-add"
	if c.Op == world.ChangeDelete {
		name = "combat-combatant-remove"
	}
	sceneID, _ := e.b.combatScene(combatUUID)
	full := map[string]any{"encounterId": combatID, "uuid": c.UUID, "combatant": combatantSummary(combatUUID, sceneID, e.doc)}
	e.add(ChannelCombat, name, combatID, full, nil, nil, isHidden(e.doc))
}

// combatScene returns the scene id of a combat changed in this transaction.
func (b *builder) combatScene(combatUUID string) (string, bool) {
	c := b.changes[combatUUID]
	if c == nil {
		return "", false
	}
	doc := c.After
	if doc == nil {
		doc = c.Before
	}
	s, ok := doc["scene"].(string)
	return s, ok
}

// combatState is a combat's state as combat events carry it; players get
// the combatants without the hidden ones.
func combatState(uuid string, combat world.Document, forPlayers bool) map[string]any {
	id := strings.TrimPrefix(uuid, "Combat.")
	sceneID, _ := combat["scene"].(string)
	var list []any
	docs, _ := combat["combatants"].([]any)
	for _, d := range docs {
		cb, _ := d.(map[string]any)
		if cb == nil || forPlayers && isHidden(cb) {
			continue
		}
		list = append(list, combatantSummary(uuid, sceneID, cb))
	}
	if list == nil {
		list = []any{}
	}
	return map[string]any{
		"encounterId": id,
		"uuid":        uuid,
		"round":       numberOr(combat["round"]),
		"turn":        numberOr(combat["turn"]),
		"started":     combat["started"] == true,
		"active":      combat["active"] == true,
		"combatants":  list,
	}
}

// combatantSummary is one combatant as combat events list it.
func combatantSummary(combatUUID, sceneID string, cb world.Document) map[string]any {
	id, _ := cb["_id"].(string)
	out := map[string]any{
		"id":         id,
		"uuid":       combatUUID + ".Combatant." + id,
		"name":       cb["name"],
		"initiative": cb["initiative"],
		"defeated":   cb["defeated"] == true,
		"hidden":     isHidden(cb),
		"actorUuid":  nil,
		"tokenUuid":  nil,
	}
	if a, _ := cb["actorId"].(string); a != "" {
		out["actorUuid"] = "Actor." + a
	}
	scene, _ := cb["sceneId"].(string)
	if scene == "" {
		scene = sceneID
	}
	if t, _ := cb["tokenId"].(string); t != "" && scene != "" {
		out["tokenUuid"] = "Scene." + scene + ".Token." + t
	}
	return out
}

// playerCombatDoc is a combat's source data without its hidden combatants.
func playerCombatDoc(uuid string, combat world.Document) map[string]any {
	out := fullDoc(uuid, combat)
	docs, _ := combat["combatants"].([]any)
	visible := []any{}
	for _, d := range docs {
		if cb, _ := d.(map[string]any); cb != nil && !isHidden(cb) {
			visible = append(visible, cb)
		}
	}
	out["combatants"] = visible
	return out
}

func isHidden(doc world.Document) bool { return doc["hidden"] == true }

// numberOr returns a JSON number, or 0 for anything else.
func numberOr(v any) any {
	if f, ok := v.(float64); ok {
		return f
	}
	return 0
}

// fullDoc is a document's source data with its uuid, as an OBSERVER reads
// it. The document is shared, so only the top map is copied.
func fullDoc(uuid string, doc world.Document) map[string]any {
	out := make(map[string]any, len(doc)+1)
	for k, v := range doc {
		out[k] = v
	}
	out["uuid"] = uuid
	return out
}

// limitedDoc is what a LIMITED reader sees of a document.
func limitedDoc(documentName, uuid string, doc world.Document) map[string]any {
	img, ok := doc["img"]
	if !ok {
		img = nil
	}
	return map[string]any{"name": doc["name"], "uuid": uuid, "type": documentName, "img": img}
}

// limitedChanges keeps the changed fields a LIMITED reader may see; nil
// when there are none.
func limitedChanges(changes map[string]any) map[string]any {
	var out map[string]any
	for _, k := range limitedKeys {
		if v, ok := changes[k]; ok {
			if out == nil {
				out = map[string]any{}
			}
			out[k] = v
		}
	}
	return out
}

// with returns a copy of m with extra key, value pairs set.
func with(m map[string]any, kv ...any) map[string]any {
	out := make(map[string]any, len(m)+len(kv)/2)
	for k, v := range m {
		out[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1]
	}
	return out
}

// encode writes a payload as JSON; payloads are built from JSON values only.
func encode(v map[string]any) json.RawMessage {
	data, err := world.EncodeJSON(v)
	if err != nil {
		data, _ = json.Marshal(map[string]any{"error": "unencodable payload"})
	}
	return data
}

// eventOverhead is what an event costs besides its payloads and embeds,
// roughly: its struct, its name and key, and its place in the ring.
const eventOverhead = 256

// footprint estimates the memory an event holds, for the ring's byte
// budget: its payloads, the documents its access rules carry, and a fixed
// overhead. It depends only on what never changes once the event is
// built, so the ring counts the same size in and out.
func (ev *event) footprint() int64 {
	n := eventOverhead + len(ev.Full) + len(ev.Player) + len(ev.Limited) + len(ev.Name) + len(ev.Key)
	n += docFootprint(ev.Access.Doc)
	for i := range ev.Embeds {
		n += eventOverhead + docFootprint(ev.Embeds[i].Access.Doc)
	}
	return int64(n)
}

// journalJSON serialises the event for the journal, as json.Marshal would
// read back (json.Unmarshal into an event): the payloads, already JSON, are
// copied as they are rather than scanned and compacted again, which made
// recording an event cost more than building it.
func (ev *event) journalJSON() ([]byte, error) {
	str := func(dst []byte, s string) ([]byte, error) {
		q, err := world.EncodeJSON(s)
		return append(dst, q...), err
	}
	raw := func(dst []byte, r json.RawMessage) []byte {
		if len(r) == 0 {
			return append(dst, "null"...)
		}
		return append(dst, r...)
	}
	size := 128 + len(ev.Full) + len(ev.Player) + len(ev.Limited)
	out := make([]byte, 0, size)
	var err error
	out = append(out, `{"seq":`...)
	out = strconv.AppendUint(out, ev.Seq, 10)
	out = append(out, `,"ch":`...)
	if out, err = str(out, string(ev.Channel)); err != nil {
		return nil, err
	}
	out = append(out, `,"name":`...)
	if out, err = str(out, ev.Name); err != nil {
		return nil, err
	}
	if ev.Key != "" {
		out = append(out, `,"key":`...)
		if out, err = str(out, ev.Key); err != nil {
			return nil, err
		}
	}
	out = append(out, `,"acc":{"type":`...)
	if out, err = str(out, ev.Access.Type); err != nil {
		return nil, err
	}
	doc, err := world.EncodeJSON(ev.Access.Doc)
	if err != nil {
		return nil, err
	}
	out = append(out, `,"doc":`...)
	out = append(out, doc...)
	out = append(out, '}')
	out = append(out, `,"full":`...)
	out = raw(out, ev.Full)
	if len(ev.Player) > 0 {
		out = append(out, `,"player":`...)
		out = raw(out, ev.Player)
	}
	if len(ev.Limited) > 0 {
		out = append(out, `,"limited":`...)
		out = raw(out, ev.Limited)
	}
	if ev.GMOnly {
		out = append(out, `,"gm":true`...)
	}
	if len(ev.Embeds) > 0 {
		emb, err := json.Marshal(ev.Embeds)
		if err != nil {
			return nil, err
		}
		out = append(out, `,"emb":`...)
		out = append(out, emb...)
	}
	if ev.Format != 0 {
		out = append(out, `,"v":`...)
		out = strconv.AppendInt(out, int64(ev.Format), 10)
	}
	return append(out, '}'), nil
}

// docFootprint estimates the memory of an access document: a few fields
// (see accessFields), of which only ownership and whisper lists grow, with
// the users of the world.
func docFootprint(doc world.Document) int {
	n := 0
	for k, v := range doc {
		n += 64 + len(k)
		switch v := v.(type) {
		case map[string]any:
			n += 64 * len(v)
		case []any:
			n += 48 * len(v)
		case string:
			n += len(v)
		}
	}
	return n
}
