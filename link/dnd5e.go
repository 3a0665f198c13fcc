package link

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/dice"
	"github.com/tabletop-relay/relay/world/dnd5e"
)

// The fifth-edition operations of a linked world.
//
// The module registers its dnd5e request types (reference §1.11, §3) only
// in worlds of the dnd5e system, so a linked world offers [world.Dnd5e]
// only while its tabletop says (the connection's `systemId`) that it runs
// that system: [Linked.Resolved] returns the world as a [rulesLinked] then,
// and as the plain [Linked] otherwise, whose missing capability the
// services answer with 501 naming the operation.
//
// Each operation is sent as the module's request type with its parameters,
// and the module's reply is converted into the world's result types, so
// that the services answer exactly as for an embedded world. Where the
// module applies fewer rules than the relay (reference §3, §9: it lets
// LIMITED users read sheets and roll, changes coins and prepares spells
// without a permission check, clamps coins at zero, lets experience go
// negative, uses any item by uuid, equips and attunes anything, finds
// actors by name or through the selection whoever may see them), the
// relay checks first, from the actor as the module sends it to the game
// master, and refuses with the embedded world's texts; nothing is sent
// then. Fields of our answers the module does not report are derived
// where its reply or the actor allows (a roll's mode from its formula, a
// death save's outcome from the counters, a use's concentration from the
// item), else left empty (see docs/guide/linked-tabletops.md).

// rulesLinked is a linked world of the dnd5e system: a [Linked] that also
// offers the fifth-edition operations.
type rulesLinked struct{ *Linked }

// The capabilities of a dnd5e linked world, checked by the compiler.
var (
	_ world.World = rulesLinked{}
	_ world.Dnd5e = rulesLinked{}
	_ world.Files = rulesLinked{}
)

// systemDnd5e is the system id of the fifth-edition system.
const systemDnd5e = "dnd5e"

// Resolved returns the world as the services should see it now: with the
// fifth-edition operations when the tabletop runs the dnd5e system,
// without them otherwise.
func (w *Linked) Resolved() world.World {
	if w.hub.SystemID(w.clientID) == systemDnd5e {
		return rulesLinked{w}
	}
	return w
}

// chat is createChatMessage as sent to the module: always explicit, since
// the module's default differs by system version (reference §9.6) and
// the relay's is to post.
func chat(params map[string]any, on bool) { params["createChatMessage"] = on }

// actorParams adds an actor reference's fields for the operations whose
// module handler finds the actor by uuid or name only (reference §3.1):
// the actor of the selection is looked up here and sent by uuid.
func (w rulesLinked) actorParams(ctx context.Context, user *world.User, params map[string]any, ref world.ActorRef) error {
	if ref.UUID == "" && ref.Name == "" && ref.Selected {
		uuid, err := w.selectedActor(ctx, user)
		if err != nil {
			return err
		}
		ref.UUID = uuid
	}
	if ref.UUID == "" && ref.Name != "" {
		uuid, err := w.actorNamed(ctx, user, ref.Name)
		if err != nil {
			return err
		}
		if uuid != "" {
			ref.UUID, ref.Name = uuid, ""
		}
	}
	param(params, "actorUuid", ref.UUID)
	param(params, "actorName", ref.Name)
	return nil
}

// actorNamed finds, for a user who is not a GM, the actor of a name the
// way an embedded world does: among the actors the user can see only, so
// that an actor hidden from them is not found, exactly like one that does
// not exist (the module looks among all actors, and its refusals would
// tell the user that the actor exists). It returns the actor's uuid, to
// be sent instead of the name; for GMs and calls without a user it
// returns "" and the module finds the actor itself.
func (w rulesLinked) actorNamed(ctx context.Context, user *world.User, name string) (string, error) {
	if user == nil || user.IsGM() {
		return "", nil
	}
	notFound := world.Errorf(world.ErrNotFound, "Actor not found: %s", name)
	// The module's get-concentration finds an actor by name (reference
	// §3.1) and changes nothing: asked as the game master, it names the
	// actor's uuid.
	r, err := w.request(ctx, nil, "get-concentration", map[string]any{"actorName": name})
	if err != nil {
		if errors.Is(err, world.ErrNotFound) {
			return "", notFound
		}
		return "", err
	}
	var data struct {
		ActorUUID string `json:"actorUuid"`
	}
	if err := r.decode("data", &data); err != nil || data.ActorUUID == "" {
		return "", notFound
	}
	doc, ok, err := w.gmAccess(ctx, data.ActorUUID)
	if err != nil || !ok {
		return "", notFound
	}
	if world.LevelOf(user, "Actor", doc) < world.LevelLimited {
		return "", notFound
	}
	return data.ActorUUID, nil
}

// selectedActor returns the actor of the first selected token that user
// sees, as an embedded world finds it: the selection is the table's (read
// as the game master), but only actors the user can see count.
func (w rulesLinked) selectedActor(ctx context.Context, user *world.User) (string, error) {
	tokens, err := w.Selected(ctx, nil)
	if err != nil && !errors.Is(err, world.ErrFailedPrecondition) {
		return "", err
	}
	for _, t := range tokens {
		if t.ActorUUID != "" && (user == nil || user.IsGM() || w.canSee(ctx, user, t.ActorUUID)) {
			return t.ActorUUID, nil
		}
	}
	return "", world.Errorf(world.ErrFailedPrecondition, "No token selected")
}

// itemParams adds an item reference's fields.
func itemParams(params map[string]any, ref world.ItemRef) {
	param(params, "itemUuid", ref.UUID)
	param(params, "itemName", ref.Name)
}

// data decodes the reply's `data` into v; a reply without one cannot be
// read.
func (w rulesLinked) data(r moduleReply, requestType string, v any) error {
	raw, ok := r["data"]
	if !ok || string(raw) == "null" {
		return badReply(w.clientID, requestType, "no data")
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return badReply(w.clientID, requestType, err.Error())
	}
	return nil
}

// The relay's own checks.

// gmActor reads an actor as the game master sees it (the module's `entity`
// without a user): the relay's checks need its ownership and values. An
// unknown actor is the embedded world's text. ok is false when uuid is
// not a world actor's (a token's actor, say), which the relay leaves to
// the module.
func (w rulesLinked) gmActor(ctx context.Context, uuid string) (doc world.Document, ok bool, err error) {
	return w.readActor(ctx, uuid, &doc, func() world.Document { return doc })
}

// gmAccess is gmActor for the permission checks alone: it decodes only the
// actor's name and ownership (an actor's JSON is mostly its items, which
// the checks do not need), and returns them as a document.
func (w rulesLinked) gmAccess(ctx context.Context, uuid string) (world.Document, bool, error) {
	var access struct {
		Name      *string        `json:"name"`
		Ownership map[string]any `json:"ownership"`
	}
	return w.readActor(ctx, uuid, &access, func() world.Document {
		doc := world.Document{}
		if access.Name != nil {
			doc["name"] = *access.Name
		}
		if access.Ownership != nil {
			doc["ownership"] = access.Ownership
		}
		return doc
	})
}

// readActor reads a world actor as the game master sees it into v, and
// returns result() (see gmActor).
func (w rulesLinked) readActor(ctx context.Context, uuid string, v any, result func() world.Document) (world.Document, bool, error) {
	if parts := strings.Split(uuid, "."); len(parts) != 2 || parts[0] != "Actor" || parts[1] == "" {
		return nil, false, nil
	}
	r, err := w.request(ctx, nil, "entity", map[string]any{"uuid": uuid})
	if err != nil {
		if errors.Is(err, world.ErrNotFound) {
			return nil, false, world.Errorf(world.ErrNotFound, "Actor not found with UUID: %s", uuid)
		}
		return nil, false, err
	}
	data := r["data"]
	if len(data) == 0 || data[0] != '{' || json.Unmarshal(data, v) != nil {
		return nil, false, world.Errorf(world.ErrNotFound, "Actor not found with UUID: %s", uuid)
	}
	return result(), true, nil
}

// requireLevel refuses a user below need on an actor the way the embedded
// world does (see levelError). GMs and calls without a user pass without
// a look.
func (w rulesLinked) requireLevel(ctx context.Context, user *world.User, uuid string, need world.Level, operation string) error {
	if user == nil || user.IsGM() {
		return nil
	}
	doc, ok, err := w.gmAccess(ctx, uuid)
	if err != nil || !ok {
		return err
	}
	return levelError(user, doc, uuid, need, operation)
}

// send sends one of the ruleset's requests. The module's refusals of a
// user name the actor whether or not the user may see it; an embedded
// world's name it only to a user who may (a write refusal gives the uuid
// instead, a read refusal says `view this entity`). So when the module
// refuses a user who cannot see an actor of the request, the relay tells
// them what an embedded world would.
func (w rulesLinked) send(ctx context.Context, user *world.User, requestType string, params map[string]any) (moduleReply, error) {
	r, err := w.request(ctx, user, requestType, params)
	if err == nil || user == nil || user.IsGM() || !errors.Is(err, world.ErrPermission) {
		return r, err
	}
	msg := err.Error()
	for _, key := range []string{"actorUuid", "sourceActorUuid", "targetActorUuid"} {
		uuid, _ := params[key].(string)
		if uuid == "" {
			continue
		}
		doc, ok, derr := w.gmAccess(ctx, uuid)
		if derr != nil || !ok || world.LevelOf(user, "Actor", doc) != world.LevelNone {
			continue
		}
		name, _ := doc["name"].(string)
		switch {
		case strings.HasSuffix(msg, " to view actor '"+name+"'"):
			return nil, world.Errorf(world.ErrPermission, "User '%s' does not have permission to view this entity", user.Name)
		case name != "" && strings.HasSuffix(msg, " '"+name+"'"):
			return nil, world.Errorf(world.ErrPermission, "%s'%s'", strings.TrimSuffix(msg, "'"+name+"'"), uuid)
		}
	}
	return r, err
}

// refusal is the error of a read the module refused: its refusal of a
// user names the actor even to a user who may not see it, so the relay's
// own verdict replaces it when there is one.
func (w rulesLinked) refusal(ctx context.Context, user *world.User, uuid string, err error) error {
	if !errors.Is(err, world.ErrPermission) || uuid == "" {
		return err
	}
	if own := w.requireLevel(ctx, user, uuid, world.LevelObserver, "view actor"); own != nil {
		return own
	}
	return err
}

// levelError is the embedded world's verdict on a user's level on an actor
// already read: `User '<n>' does not have permission to <operation>
// '<name>'`, where a user who cannot see the actor at all is told its uuid
// rather than its name, or, for a read (need below OWNER) they cannot make
// at all, `User '<n>' does not have permission to view this entity`.
func levelError(user *world.User, doc world.Document, uuid string, need world.Level, operation string) error {
	if user == nil || user.IsGM() {
		return nil
	}
	level := world.LevelOf(user, "Actor", doc)
	if level >= need {
		return nil
	}
	if level == world.LevelNone && need < world.LevelOwner {
		return world.Errorf(world.ErrPermission, "User '%s' does not have permission to view this entity", user.Name)
	}
	name, _ := doc["name"].(string)
	if name == "" || level == world.LevelNone {
		name = uuid
	}
	return world.Errorf(world.ErrPermission, "User '%s' does not have permission to %s '%s'", user.Name, operation, name)
}

// Rolls.

// rollReply is a d20 roll as the module reports it: the three fields are
// absent when no roll was made (reference §9.10).
type rollReply struct {
	ActorUUID string   `json:"actorUuid"`
	Total     *float64 `json:"total"`
	Formula   string   `json:"formula"`
	Result    string   `json:"result"`
}

// result converts the roll, or refuses a reply without one: the relay
// answers every roll operation with a roll or an error, never with
// missing fields.
func (w rulesLinked) result(requestType string, r rollReply, advantage, disadvantage bool) (world.RollResult, error) {
	if r.Total == nil || r.Formula == "" {
		return world.RollResult{}, world.Errorf(world.ErrFailedPrecondition, "The tabletop made no roll for %s", requestType)
	}
	total := int(*r.Total)
	return world.RollResult{ActorUUID: r.ActorUUID, Total: total, Formula: r.Formula, Result: r.Result,
		Roll: dice.Result{Formula: r.Formula, Result: r.Result, Total: *r.Total}, Mode: modeOf(r.Formula, advantage, disadvantage)}, nil
}

// modeOf tells a d20 roll's mode from its formula (2d20kh is advantage,
// 2d20kl disadvantage): the module does not report the mode's sources, so
// only the caller's request is named as one.
func modeOf(formula string, advantage, disadvantage bool) world.RollMode {
	m := world.RollMode{Mode: "normal", Advantage: []string{}, Disadvantage: []string{}}
	switch first, _, _ := strings.Cut(strings.TrimSpace(formula), " "); {
	case strings.HasPrefix(first, "2d20kh"):
		m.Mode = "advantage"
	case strings.HasPrefix(first, "2d20kl"):
		m.Mode = "disadvantage"
	}
	if advantage {
		m.Advantage = append(m.Advantage, "requested")
	}
	if disadvantage {
		m.Disadvantage = append(m.Disadvantage, "requested")
	}
	return m
}

// ActorDetails implements [world.Dnd5e] with the module's
// `get-actor-details`. `spellSlots` is asked for as `spells`, which brings
// the slots (the module knows no `spellSlots` detail). The module shows a
// sheet to LIMITED users; the relay, as an embedded world, only to
// OBSERVER, and checks after the read, which changes nothing.
func (w rulesLinked) ActorDetails(ctx context.Context, user *world.User, actorUUID string, details []string) (world.ActorDetails, error) {
	asked := make([]string, 0, len(details))
	for _, d := range details {
		if d == "spellSlots" {
			d = "spells"
		}
		if !slices.Contains(asked, d) {
			asked = append(asked, d)
		}
	}
	params := map[string]any{"actorUuid": actorUUID, "details": asked}
	if details == nil {
		params["details"] = []string{}
	}
	r, err := w.send(ctx, user, "get-actor-details", params)
	if err != nil {
		return world.ActorDetails{}, w.refusal(ctx, user, actorUUID, err)
	}
	var data struct {
		UUID          string          `json:"uuid"`
		Resources     json.RawMessage `json:"resources"`
		Items         []any           `json:"items"`
		Spells        []any           `json:"spells"`
		SpellSlots    map[string]any  `json:"spellSlots"`
		Features      []any           `json:"features"`
		Stats         map[string]any  `json:"stats"`
		Abilities     map[string]any  `json:"abilities"`
		Skills        map[string]any  `json:"skills"`
		Details       map[string]any  `json:"details"`
		Conditions    []any           `json:"conditions"`
		Concentration map[string]any  `json:"concentration"`
	}
	if err := w.data(r, "get-actor-details", &data); err != nil {
		return world.ActorDetails{}, err
	}
	if err := w.requireLevel(ctx, user, actorUUID, world.LevelObserver, "view actor"); err != nil {
		return world.ActorDetails{}, err
	}
	out := world.ActorDetails{UUID: cmpOr(data.UUID, actorUUID), Items: data.Items, Spells: data.Spells, SpellSlots: data.SpellSlots,
		Features: data.Features, Stats: data.Stats, Abilities: data.Abilities, Skills: data.Skills, Info: data.Details,
		Conditions: data.Conditions, Concentration: data.Concentration}
	if len(data.Resources) > 0 {
		if err := json.Unmarshal(data.Resources, &out.Resources); err != nil {
			return world.ActorDetails{}, badReply(w.clientID, "get-actor-details", err.Error())
		}
	}
	// A detail asked for is never missing from the answer, as in an
	// embedded world, whatever the module left out.
	for _, d := range asked {
		switch d {
		case "items":
			out.Items = w.withContainers(ctx, actorUUID, orEmptyList(out.Items))
		case "spells":
			out.Spells = orEmptyList(out.Spells)
			if out.SpellSlots == nil {
				out.SpellSlots = map[string]any{}
			}
		case "features":
			out.Features = orEmptyList(out.Features)
		case "conditions":
			out.Conditions = orEmptyList(out.Conditions)
			if out.Concentration == nil {
				out.Concentration = map[string]any{"active": false}
			}
		}
	}
	return out, nil
}

// itemSourceKeys are the fields of an item in the `items`, `spells` and
// `features` details: its source object's (reference §3.2).
var itemSourceKeys = []string{"_id", "name", "type", "img", "system", "effects", "folder", "sort", "ownership", "flags", "_stats"}

// withContainers adds the actor's containers to the module's `items`
// detail, which looks for the type `backpack` that the system renamed
// `container` (reference §9.9), so that the detail lists the whole
// inventory in the actor's order, as an embedded world's does. The items
// the module sent are kept as it sent them.
func (w rulesLinked) withContainers(ctx context.Context, uuid string, items []any) []any {
	doc, ok, err := w.gmActor(ctx, uuid)
	if err != nil || !ok {
		return items
	}
	all, _ := doc["items"].([]any)
	if !slices.ContainsFunc(all, func(it any) bool { m, _ := it.(map[string]any); return m["type"] == "container" }) {
		return items
	}
	sent := map[string]any{}
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			if id, ok := m["_id"].(string); ok {
				sent[id] = it
			}
		}
	}
	out := make([]any, 0, len(items)+1)
	for _, it := range all {
		m, _ := it.(map[string]any)
		id, _ := m["_id"].(string)
		switch {
		case sent[id] != nil:
			out = append(out, sent[id])
			delete(sent, id)
		case m["type"] == "container":
			src := map[string]any{}
			for _, k := range itemSourceKeys {
				if v, ok := m[k]; ok {
					src[k] = v
				}
			}
			out = append(out, src)
		}
	}
	// Anything the module sent that the actor read does not hold (it
	// changed in between) stays, in the module's order.
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			if id, _ := m["_id"].(string); sent[id] != nil {
				out = append(out, it)
				delete(sent, id)
			}
		}
	}
	return out
}

// orEmptyList is l, or an empty list for nil.
func orEmptyList(l []any) []any {
	if l == nil {
		return []any{}
	}
	return l
}

// cmpOr returns a when it is not empty, else b.
func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// check sends a skill check, an ability check or a saving throw.
func (w rulesLinked) check(ctx context.Context, user *world.User, requestType string, p world.CheckParams) (world.RollResult, error) {
	if p.ActorUUID == "" {
		return world.RollResult{}, invalid("actorUuid is required")
	}
	params := map[string]any{"actorUuid": p.ActorUUID}
	if requestType == "skill-check" {
		if err := dnd5e.CheckSkill(p.Skill); err != nil {
			return world.RollResult{}, err
		}
		params["skill"] = p.Skill
	} else {
		if err := dnd5e.CheckAbility(p.Ability); err != nil {
			return world.RollResult{}, err
		}
		params["ability"] = p.Ability
	}
	if err := dnd5e.CheckBonus(p.Bonus); err != nil {
		return world.RollResult{}, err
	}
	// The module lets LIMITED users roll; a roll shows the actor's
	// modifiers, which the relay shows to OBSERVER only.
	if err := w.requireLevel(ctx, user, p.ActorUUID, world.LevelObserver, "view actor"); err != nil {
		return world.RollResult{}, err
	}
	param(params, "advantage", p.Advantage)
	param(params, "disadvantage", p.Disadvantage)
	param(params, "bonus", p.Bonus)
	chat(params, p.ChatMessage)
	r, err := w.send(ctx, user, requestType, params)
	if err != nil {
		return world.RollResult{}, err
	}
	var roll rollReply
	if err := w.data(r, requestType, &roll); err != nil {
		return world.RollResult{}, err
	}
	roll.ActorUUID = cmpOr(roll.ActorUUID, p.ActorUUID)
	return w.result(requestType, roll, p.Advantage, p.Disadvantage)
}

// SkillCheck implements [world.Dnd5e] with the module's `skill-check`.
func (w rulesLinked) SkillCheck(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.check(ctx, user, "skill-check", p)
}

// AbilitySave implements [world.Dnd5e] with the module's `ability-save`.
func (w rulesLinked) AbilitySave(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.check(ctx, user, "ability-save", p)
}

// AbilityCheck implements [world.Dnd5e] with the module's `ability-check`.
func (w rulesLinked) AbilityCheck(ctx context.Context, user *world.User, p world.CheckParams) (world.RollResult, error) {
	return w.check(ctx, user, "ability-check", p)
}

// DeathSave implements [world.Dnd5e] with the module's `death-save`. The
// outcome is read from the counters the module reports after the roll: a
// total of 10 or more succeeds, a success that leaves both counters at 0
// stabilised the actor (the third success, or a natural 20), three
// failures mean death.
func (w rulesLinked) DeathSave(ctx context.Context, user *world.User, p world.DeathSaveParams) (world.DeathSaveResult, error) {
	if p.ActorUUID == "" {
		return world.DeathSaveResult{}, invalid("actorUuid is required")
	}
	params := map[string]any{"actorUuid": p.ActorUUID}
	param(params, "advantage", p.Advantage)
	chat(params, p.ChatMessage)
	r, err := w.send(ctx, user, "death-save", params)
	if err != nil {
		return world.DeathSaveResult{}, err
	}
	var data struct {
		rollReply
		DeathSaves struct {
			Success int `json:"success"`
			Failure int `json:"failure"`
		} `json:"deathSaves"`
	}
	if err := w.data(r, "death-save", &data); err != nil {
		return world.DeathSaveResult{}, err
	}
	if data.Total == nil {
		// The system refuses a death save to an actor above 0 hit points
		// or already stable or dead, and the module then answers without
		// a roll (reference §3.8).
		return world.DeathSaveResult{}, w.noDeathSave(ctx, p.ActorUUID)
	}
	data.ActorUUID = cmpOr(data.ActorUUID, p.ActorUUID)
	roll, err := w.result("death-save", data.rollReply, p.Advantage, false)
	if err != nil {
		return world.DeathSaveResult{}, err
	}
	out := world.DeathSaveResult{RollResult: roll, Successes: data.DeathSaves.Success, Failures: data.DeathSaves.Failure}
	out.Success = roll.Total >= 10
	out.Stable = out.Success && out.Successes == 0 && out.Failures == 0
	out.Dead = out.Failures >= 3
	return out, nil
}

// noDeathSave tells why the tabletop rolled no death save, read from the
// actor, in the embedded world's words.
func (w rulesLinked) noDeathSave(ctx context.Context, uuid string) error {
	doc, ok, err := w.gmActor(ctx, uuid)
	if err != nil {
		return err
	}
	if ok {
		name := doc["name"]
		failures, _ := number(at(doc, "system", "attributes", "death", "failure"))
		exhaustion, _ := number(at(doc, "system", "attributes", "exhaustion"))
		hp, _ := number(at(doc, "system", "attributes", "hp", "value"))
		switch {
		case failures >= 3:
			return world.Errorf(world.ErrFailedPrecondition, "%s is dead: three death saves failed", name)
		case exhaustion >= 6:
			return world.Errorf(world.ErrFailedPrecondition, "%s is dead: exhaustion level 6", name)
		case hp > 0:
			return world.Errorf(world.ErrFailedPrecondition, "%s is not at 0 hit points and makes no death saves", name)
		}
	}
	return world.Errorf(world.ErrFailedPrecondition, "%s makes no death saves now", uuid)
}

// Rests.

// rest sends a short or a long rest.
func (w rulesLinked) rest(ctx context.Context, user *world.User, requestType string, params map[string]any, p world.RestParams) (world.RestResult, error) {
	if p.Actor.UUID == "" && !p.Actor.Selected {
		return world.RestResult{}, invalid("Either actorUuid or selected must be provided")
	}
	if p.Actor.UUID == "" {
		// The module takes the first controlled token's actor, whoever
		// may see it; the relay finds it as an embedded world does and
		// sends its uuid.
		uuid, err := w.selectedActor(ctx, user)
		if err != nil {
			return world.RestResult{}, err
		}
		p.Actor = world.ActorRef{UUID: uuid}
	}
	param(params, "actorUuid", p.Actor.UUID)
	param(params, "selected", p.Actor.Selected)
	r, err := w.send(ctx, user, requestType, params)
	if err != nil {
		return world.RestResult{}, err
	}
	var data struct {
		ActorUUID string                     `json:"actorUuid"`
		Result    map[string]json.RawMessage `json:"result"`
	}
	if err := w.data(r, requestType, &data); err != nil {
		return world.RestResult{}, err
	}
	// The system's rest result is read field by field, each leniently:
	// it is the system's own object, whose fields a version may add,
	// change or drop, and a rest that happened must not read as a failure.
	res := moduleReply(data.Result)
	out := world.RestResult{ActorUUID: cmpOr(data.ActorUUID, p.Actor.UUID)}
	_ = res.decode("type", &out.Type)
	_ = res.decode("deltas", &out.Deltas)
	_ = res.decode("updateData", &out.UpdateData)
	_ = res.decode("updateItems", &out.UpdateItems)
	_ = res.decode("newDay", &out.NewDay)
	_ = res.decode("clone", &out.Clone)
	_ = res.decode("longRest", &out.LongRest)
	var dhd, dhp float64
	_ = res.decode("dhd", &dhd)
	_ = res.decode("dhp", &dhp)
	out.DHD, out.DHP = int(dhd), int(dhp)
	var rolls []json.RawMessage
	_ = res.decode("rolls", &rolls)
	for _, raw := range rolls {
		// A roll as the system serialises it has at least a formula and
		// a total; the relay keeps those, and the dice it can read.
		var roll dice.Result
		if json.Unmarshal(raw, &roll) != nil {
			var basic struct {
				Formula string  `json:"formula"`
				Result  string  `json:"result"`
				Total   float64 `json:"total"`
			}
			_ = json.Unmarshal(raw, &basic)
			roll = dice.Result{Formula: basic.Formula, Result: basic.Result, Total: basic.Total}
		}
		if roll.Dice == nil {
			roll.Dice = []dice.Die{}
		}
		out.Rolls = append(out.Rolls, roll)
	}
	// An actor the system does not rest (a vehicle) gets `{completed:
	// true}` from the module: the rest of its kind, with nothing changed.
	if out.Type == "" {
		out.Type, out.LongRest = strings.TrimSuffix(requestType, "-rest"), requestType == "long-rest"
	}
	if out.Deltas == nil {
		out.Deltas = map[string]any{"hitPoints": 0.0, "hitDice": 0.0}
	}
	if out.UpdateData == nil {
		out.UpdateData = map[string]any{}
	}
	if out.UpdateItems == nil {
		out.UpdateItems = []any{}
	}
	if out.Rolls == nil {
		out.Rolls = []dice.Result{}
	}
	return out, nil
}

// ShortRest implements [world.Dnd5e] with the module's `short-rest`. The
// threshold is sent as it is: the module reads it as a number of missing
// hit points (see [world.RestParams]).
func (w rulesLinked) ShortRest(ctx context.Context, user *world.User, p world.RestParams) (world.RestResult, error) {
	params := map[string]any{}
	param(params, "autoHD", p.AutoHD)
	if t := p.AutoHDThreshold; t != nil {
		if math.IsNaN(*t) || math.IsInf(*t, 0) || *t < 0 {
			return world.RestResult{}, invalid("autoHDThreshold must be a fraction from 0 to 1 or a number of missing hit points above 1")
		}
		params["autoHDThreshold"] = *t
	}
	return w.rest(ctx, user, "short-rest", params, p)
}

// LongRest implements [world.Dnd5e] with the module's `long-rest`.
func (w rulesLinked) LongRest(ctx context.Context, user *world.User, p world.RestParams) (world.RestResult, error) {
	newDay := p.NewDay == nil || *p.NewDay
	return w.rest(ctx, user, "long-rest", map[string]any{"newDay": newDay}, p)
}

// Items, experience and coins.

// ModifyItemCharges implements [world.Dnd5e] with the module's
// `modify-item-charges`.
func (w rulesLinked) ModifyItemCharges(ctx context.Context, user *world.User, actorUUID string, item world.ItemRef, amount int) (world.ChargesResult, error) {
	if actorUUID == "" {
		return world.ChargesResult{}, invalid("actorUuid is required")
	}
	if item.UUID == "" && item.Name == "" {
		return world.ChargesResult{}, invalid("itemUuid or itemName is required")
	}
	// The module changes the charges of an item that has none (to 0); an
	// embedded world refuses. A maximum given as a formula is left to the
	// module, which reads it evaluated.
	err := w.checkItem(ctx, user, actorUUID, item, "modify item charges on", func(_, it map[string]any) error {
		switch m := at(it, "system", "uses", "max").(type) {
		case float64:
			if m > 0 {
				return nil
			}
		case string:
			n, err := strconv.ParseFloat(strings.TrimSpace(m), 64)
			if err != nil && strings.TrimSpace(m) != "" || n > 0 {
				return nil
			}
		}
		return world.Errorf(world.ErrFailedPrecondition, "Item '%s' has no charges", it["name"])
	})
	if err != nil {
		return world.ChargesResult{}, err
	}
	params := map[string]any{"actorUuid": actorUUID, "amount": amount}
	itemParams(params, item)
	r, err := w.send(ctx, user, "modify-item-charges", params)
	if err != nil {
		return world.ChargesResult{}, err
	}
	var data struct {
		ItemUUID   string  `json:"itemUuid"`
		OldCharges float64 `json:"oldCharges"`
		NewCharges float64 `json:"newCharges"`
	}
	if err := w.data(r, "modify-item-charges", &data); err != nil {
		return world.ChargesResult{}, err
	}
	return world.ChargesResult{ItemUUID: data.ItemUUID, OldCharges: int(data.OldCharges), NewCharges: int(data.NewCharges)}, nil
}

// ModifyExperience implements [world.Dnd5e] with the module's
// `modify-experience`. The module lets experience go below 0; the relay
// refuses such a removal first, as an embedded world does, for an actor
// named by uuid.
func (w rulesLinked) ModifyExperience(ctx context.Context, user *world.User, actor world.ActorRef, amount int) (world.ExperienceChange, error) {
	if actor.UUID == "" && !actor.Selected {
		return world.ExperienceChange{}, invalid("Either actorUuid or selected must be provided")
	}
	if actor.UUID == "" {
		// The selection's actor, found as for a rest.
		uuid, err := w.selectedActor(ctx, user)
		if err != nil {
			return world.ExperienceChange{}, err
		}
		actor = world.ActorRef{UUID: uuid}
	}
	if amount < 0 {
		doc, ok, err := w.gmActor(ctx, actor.UUID)
		if err != nil {
			return world.ExperienceChange{}, err
		}
		if ok {
			if err := levelError(user, doc, actor.UUID, world.LevelOwner, "modify experience on"); err != nil {
				return world.ExperienceChange{}, err
			}
			if xp, has := number(at(doc, "system", "details", "xp", "value")); has && xp+float64(amount) < 0 {
				return world.ExperienceChange{}, world.Errorf(world.ErrFailedPrecondition, "Cannot remove %d XP: %s has only %d", -amount, doc["name"], int(xp))
			}
		}
	}
	params := map[string]any{"amount": amount}
	param(params, "actorUuid", actor.UUID)
	param(params, "selected", actor.Selected)
	r, err := w.send(ctx, user, "modify-experience", params)
	if err != nil {
		return world.ExperienceChange{}, err
	}
	var data struct {
		ActorUUID string  `json:"actorUuid"`
		OldXP     float64 `json:"oldXp"`
		NewXP     float64 `json:"newXp"`
	}
	if err := w.data(r, "modify-experience", &data); err != nil {
		return world.ExperienceChange{}, err
	}
	return world.ExperienceChange{ActorUUID: cmpOr(data.ActorUUID, actor.UUID), OldXP: int(data.OldXP), NewXP: int(data.NewXP)}, nil
}

// at returns the value at a path of nested objects, nil when missing.
func at(doc map[string]any, path ...string) any {
	var v any = doc
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// number returns v as a number when it is one.
func number(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

// balanceOf reads an actor's coins, every denomination (missing ones 0).
func balanceOf(doc map[string]any) world.Currency {
	out := world.Currency{}
	for _, d := range dnd5e.Denominations {
		n, _ := number(at(doc, "system", "currency", d))
		out[d] = int(n)
	}
	return out
}

// ModifyCurrency implements [world.Dnd5e] with the module's
// `modify-currency`, which checks no permission and clamps at 0
// (reference §9.8): the relay reads the actor first and refuses a user
// without OWNER and a removal of more than the actor has, with the
// embedded world's texts. The balance reported is the one read, with the
// module's new amount of the denomination changed.
func (w rulesLinked) ModifyCurrency(ctx context.Context, user *world.User, actorUUID, denomination string, amount int) (world.CurrencyChange, error) {
	if actorUUID == "" {
		return world.CurrencyChange{}, invalid("actorUuid is required")
	}
	if !slices.Contains(dnd5e.Denominations, denomination) {
		return world.CurrencyChange{}, invalid("currency must be one of %s", strings.Join(dnd5e.Denominations, ", "))
	}
	doc, ok, err := w.gmActor(ctx, actorUUID)
	if err != nil {
		return world.CurrencyChange{}, err
	}
	if !ok {
		return world.CurrencyChange{}, world.Errorf(world.ErrNotFound, "Actor not found with UUID: %s", actorUUID)
	}
	if err := levelError(user, doc, actorUUID, world.LevelOwner, "modify currency on"); err != nil {
		return world.CurrencyChange{}, err
	}
	bal := balanceOf(doc)
	if old := bal[denomination]; old+amount < 0 {
		return world.CurrencyChange{}, world.Errorf(world.ErrFailedPrecondition, "Insufficient %s: %s has %d, needs %d", denomination, doc["name"], old, -amount)
	}
	r, err := w.send(ctx, user, "modify-currency", map[string]any{"actorUuid": actorUUID, "currency": denomination, "amount": amount})
	if err != nil {
		return world.CurrencyChange{}, err
	}
	var data struct {
		Currency string  `json:"currency"`
		Previous float64 `json:"previous"`
		Current  float64 `json:"current"`
	}
	if err := w.data(r, "modify-currency", &data); err != nil {
		return world.CurrencyChange{}, err
	}
	bal[denomination] = int(data.Current)
	return world.CurrencyChange{ActorUUID: actorUUID, Currency: denomination, OldAmount: int(data.Previous), NewAmount: int(data.Current), Balance: bal}, nil
}

// TransferCurrency implements [world.Dnd5e] with the module's
// `transfer-currency`. The module ignores amounts that are not positive;
// the relay refuses negative ones and an empty transfer first, as an
// embedded world does, and sends the positive ones only.
func (w rulesLinked) TransferCurrency(ctx context.Context, user *world.User, p world.TransferParams) (world.TransferResult, error) {
	if p.Source.UUID == "" && p.Source.Name == "" {
		return world.TransferResult{}, invalid("sourceActorUuid or sourceActorName is required")
	}
	if p.Target.UUID == "" && p.Target.Name == "" {
		return world.TransferResult{}, invalid("targetActorUuid or targetActorName is required")
	}
	if p.Amount == nil {
		return world.TransferResult{}, invalid("currency object is required")
	}
	coins, transferred := map[string]any{}, world.Currency{}
	for _, d := range dnd5e.Denominations {
		n := p.Amount[d]
		if n < 0 {
			return world.TransferResult{}, invalid("currency.%s must not be negative", d)
		}
		if n > 0 {
			coins[d] = n
		}
		transferred[d] = n
	}
	if len(coins) == 0 {
		return world.TransferResult{}, invalid("currency must move at least one coin")
	}
	for _, ref := range []*world.ActorRef{&p.Source, &p.Target} {
		if ref.UUID == "" {
			uuid, err := w.actorNamed(ctx, user, ref.Name)
			if err != nil {
				return world.TransferResult{}, err
			}
			if uuid != "" {
				ref.UUID, ref.Name = uuid, ""
			}
		}
	}
	// The module would move coins from an actor to itself; an embedded
	// world refuses, after its permission checks.
	if p.Source.UUID != "" && p.Source.UUID == p.Target.UUID {
		if err := w.requireLevel(ctx, user, p.Source.UUID, world.LevelOwner, "transfer currency from"); err != nil {
			return world.TransferResult{}, err
		}
		if _, _, err := w.gmAccess(ctx, p.Source.UUID); err != nil {
			return world.TransferResult{}, err
		}
		return world.TransferResult{}, invalid("The source and target actors are the same")
	}
	params := map[string]any{"currency": coins}
	param(params, "sourceActorUuid", p.Source.UUID)
	param(params, "sourceActorName", p.Source.Name)
	param(params, "targetActorUuid", p.Target.UUID)
	param(params, "targetActorName", p.Target.Name)
	r, err := w.send(ctx, user, "transfer-currency", params)
	if err != nil {
		return world.TransferResult{}, err
	}
	var data struct {
		SourceActorUUID string         `json:"sourceActorUuid"`
		TargetActorUUID string         `json:"targetActorUuid"`
		SourceBalance   map[string]any `json:"sourceBalance"`
		TargetBalance   map[string]any `json:"targetBalance"`
	}
	if err := w.data(r, "transfer-currency", &data); err != nil {
		return world.TransferResult{}, err
	}
	return world.TransferResult{SourceUUID: data.SourceActorUUID, TargetUUID: data.TargetActorUUID, Transferred: transferred,
		SourceBalance: balanceOf(map[string]any{"system": map[string]any{"currency": data.SourceBalance}}),
		TargetBalance: balanceOf(map[string]any{"system": map[string]any{"currency": data.TargetBalance}})}, nil
}

// Concentration.

// GetConcentration implements [world.Dnd5e] with the module's
// `get-concentration`. The module shows it to LIMITED users; the relay,
// as an embedded world, to OBSERVER only (checked after the read, which
// changes nothing), and names the spell only to a user who may see it.
func (w rulesLinked) GetConcentration(ctx context.Context, user *world.User, actor world.ActorRef) (world.Concentration, error) {
	params := map[string]any{}
	if err := w.actorParams(ctx, user, params, actor); err != nil {
		return world.Concentration{}, err
	}
	r, err := w.send(ctx, user, "get-concentration", params)
	if err != nil {
		return world.Concentration{}, w.refusal(ctx, user, actor.UUID, err)
	}
	var data struct {
		ActorUUID       string         `json:"actorUuid"`
		IsConcentrating bool           `json:"isConcentrating"`
		Effect          map[string]any `json:"effect"`
		Spell           *string        `json:"spell"`
	}
	if err := w.data(r, "get-concentration", &data); err != nil {
		return world.Concentration{}, err
	}
	if err := w.requireLevel(ctx, user, data.ActorUUID, world.LevelObserver, "view actor"); err != nil {
		return world.Concentration{}, err
	}
	out := world.Concentration{ActorUUID: data.ActorUUID, IsConcentrating: data.IsConcentrating, Effect: data.Effect}
	if data.Spell != nil {
		out.Spell = *data.Spell
	}
	if out.Spell != "" && user != nil && !user.IsGM() {
		origin, _ := data.Effect["origin"].(string)
		if !w.canSee(ctx, user, origin) {
			out.Spell = ""
		}
	}
	return out, nil
}

// canSee reports whether user sees the document at uuid at all (LIMITED
// or more): the module answers the read as that user with data, or not.
func (w rulesLinked) canSee(ctx context.Context, user *world.User, uuid string) bool {
	if uuid == "" {
		return false
	}
	r, err := w.request(ctx, user, "entity", map[string]any{"uuid": uuid})
	if err != nil {
		return false
	}
	data := r["data"]
	return len(data) > 0 && data[0] == '{'
}

// BreakConcentration implements [world.Dnd5e] with the module's
// `break-concentration`.
func (w rulesLinked) BreakConcentration(ctx context.Context, user *world.User, actor world.ActorRef) (world.BrokenConcentration, error) {
	params := map[string]any{}
	if err := w.actorParams(ctx, user, params, actor); err != nil {
		return world.BrokenConcentration{}, err
	}
	r, err := w.send(ctx, user, "break-concentration", params)
	if err != nil {
		return world.BrokenConcentration{}, err
	}
	var data struct {
		ActorUUID       string `json:"actorUuid"`
		RemovedEffectID string `json:"removedEffectId"`
	}
	if err := w.data(r, "break-concentration", &data); err != nil {
		return world.BrokenConcentration{}, err
	}
	return world.BrokenConcentration{ActorUUID: data.ActorUUID, RemovedEffectID: data.RemovedEffectID}, nil
}

// ConcentrationSave implements [world.Dnd5e] with the module's
// `concentration-save`.
func (w rulesLinked) ConcentrationSave(ctx context.Context, user *world.User, p world.ConcentrationSaveParams) (world.ConcentrationSaveResult, error) {
	if math.IsNaN(p.Damage) || math.IsInf(p.Damage, 0) || p.Damage < 0 {
		return world.ConcentrationSaveResult{}, invalid("damage must be a number of at least 0")
	}
	if err := dnd5e.CheckBonus(p.Bonus); err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	params := map[string]any{"damage": p.Damage}
	if err := w.actorParams(ctx, user, params, p.Actor); err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	param(params, "advantage", p.Advantage)
	param(params, "disadvantage", p.Disadvantage)
	bonus, err := w.concentrationBonus(ctx, params, p.Bonus)
	if err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	param(params, "bonus", bonus)
	chat(params, p.ChatMessage)
	r, err := w.send(ctx, user, "concentration-save", params)
	if err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	var data struct {
		rollReply
		DC         float64 `json:"dc"`
		Maintained bool    `json:"maintained"`
	}
	if err := w.data(r, "concentration-save", &data); err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	roll, err := w.result("concentration-save", data.rollReply, p.Advantage, p.Disadvantage)
	if err != nil {
		return world.ConcentrationSaveResult{}, err
	}
	return world.ConcentrationSaveResult{RollResult: roll, DC: int(data.DC), Maintained: data.Maintained}, nil
}

// concentrationBonus is the bonus formula to send with a concentration
// save: the module rolls a plain Constitution save (reference §9.7), so
// the actor's concentration bonus (`system.attributes.concentration.
// bonuses.save`), which an embedded world adds after the save's own terms,
// goes ahead of the caller's bonus. For an actor named otherwise than by
// a world actor's uuid, the caller's bonus goes alone.
func (w rulesLinked) concentrationBonus(ctx context.Context, params map[string]any, bonus string) (string, error) {
	uuid, _ := params["actorUuid"].(string)
	if uuid == "" {
		return bonus, nil
	}
	doc, ok, err := w.gmActor(ctx, uuid)
	if err != nil || !ok {
		return bonus, err
	}
	own, _ := at(doc, "system", "attributes", "concentration", "bonuses", "save").(string)
	switch own, bonus = strings.TrimSpace(own), strings.TrimSpace(bonus); {
	case own == "":
		return bonus, nil
	case bonus == "":
		return own, nil
	}
	return own + " + " + bonus, nil
}

// Equipment and spells.

// toggle sends an equip or an attune, after rule, an embedded world's
// rule for the item, which the module does not apply (reference §3.10).
func (w rulesLinked) toggle(ctx context.Context, user *world.User, requestType, field string, actor world.ActorRef, item world.ItemRef, on bool,
	rule func(actor, item map[string]any) error) (world.ItemToggleResult, error) {
	params := map[string]any{field: on}
	if err := w.actorParams(ctx, user, params, actor); err != nil {
		return world.ItemToggleResult{}, err
	}
	itemParams(params, item)
	if uuid, _ := params["actorUuid"].(string); uuid != "" {
		if err := w.checkItem(ctx, user, uuid, item, "modify items on", rule); err != nil {
			return world.ItemToggleResult{}, err
		}
	}
	r, err := w.send(ctx, user, requestType, params)
	if err != nil {
		return world.ItemToggleResult{}, err
	}
	var data map[string]any
	if err := w.data(r, requestType, &data); err != nil {
		return world.ItemToggleResult{}, err
	}
	str := func(k string) string { s, _ := data[k].(string); return s }
	state, _ := data[field].(bool)
	return world.ItemToggleResult{ActorUUID: str("actorUuid"), ItemUUID: str("itemUuid"), ItemName: str("itemName"), On: state}, nil
}

// EquipItem implements [world.Dnd5e] with the module's `equip-item`.
func (w rulesLinked) EquipItem(ctx context.Context, user *world.User, actor world.ActorRef, item world.ItemRef, equipped bool) (world.ItemToggleResult, error) {
	return w.toggle(ctx, user, "equip-item", "equipped", actor, item, equipped, func(_, it map[string]any) error {
		if typ, _ := it["type"].(string); !slices.Contains(equippable, typ) {
			return world.Errorf(world.ErrFailedPrecondition, "Item '%s' (%s) cannot be equipped", it["name"], typ)
		}
		return nil
	})
}

// equippable are the item types that can be equipped, as in an embedded
// world.
var equippable = []string{"weapon", "equipment", "consumable", "tool", "container", "backpack", "loot"}

// AttuneItem implements [world.Dnd5e] with the module's `attune-item`.
func (w rulesLinked) AttuneItem(ctx context.Context, user *world.User, actor world.ActorRef, item world.ItemRef, attuned bool) (world.ItemToggleResult, error) {
	return w.toggle(ctx, user, "attune-item", "attuned", actor, item, attuned, func(a, it map[string]any) error {
		if !attuned {
			return nil
		}
		switch mode := at(it, "system", "attunement"); mode {
		case "required", "optional", 1.0, 2.0:
		default:
			return world.Errorf(world.ErrFailedPrecondition, "Item '%s' does not require attunement", it["name"])
		}
		if at(it, "system", "attuned") == true {
			return nil
		}
		limit := 3.0
		if n, ok := number(at(a, "system", "attributes", "attunement", "max")); ok {
			limit = n
		}
		count := 0
		items, _ := a["items"].([]any)
		for _, x := range items {
			if other, _ := x.(map[string]any); at(other, "system", "attuned") == true {
				count++
			}
		}
		if float64(count) >= limit {
			return world.Errorf(world.ErrFailedPrecondition, "%s is already attuned to %d items, the most allowed; end an attunement first", a["name"], count)
		}
		return nil
	})
}

// checkItem applies, before an item operation goes to the module, what an
// embedded world checks and the module does not: with the actor read as
// the game master sees it, OWNER for the user (named operation), the
// item by uuid (of that actor) or name, and rule on both. An actor that
// is not a world actor's uuid is left to the module.
func (w rulesLinked) checkItem(ctx context.Context, user *world.User, actorUUID string, ref world.ItemRef, operation string, rule func(actor, item map[string]any) error) error {
	doc, ok, err := w.gmActor(ctx, actorUUID)
	if err != nil || !ok {
		return err
	}
	if err := levelError(user, doc, actorUUID, world.LevelOwner, operation); err != nil {
		return err
	}
	it, err := findItem(actorUUID, doc, ref)
	if err != nil {
		return err
	}
	return rule(doc, it)
}

// findItem finds an actor's item as an embedded world does: by uuid,
// which must be one of that actor's items, else by name in any case.
func findItem(actorUUID string, actor map[string]any, ref world.ItemRef) (map[string]any, error) {
	if ref.UUID == "" && ref.Name == "" {
		return nil, invalid("itemUuid or itemName is required")
	}
	items, _ := actor["items"].([]any)
	if ref.UUID != "" {
		id, ok := strings.CutPrefix(ref.UUID, actorUUID+".Item.")
		if !ok || strings.Contains(id, ".") {
			return nil, invalid("Item %s does not belong to actor %s", ref.UUID, actor["name"])
		}
		for _, x := range items {
			if it, _ := x.(map[string]any); it["_id"] == id {
				return it, nil
			}
		}
		return nil, world.Errorf(world.ErrNotFound, "Item not found on actor %s: %s", actor["name"], ref.UUID)
	}
	for _, x := range items {
		if it, _ := x.(map[string]any); it != nil {
			if name, _ := it["name"].(string); strings.EqualFold(name, ref.Name) {
				return it, nil
			}
		}
	}
	return nil, world.Errorf(world.ErrNotFound, "Item not found on actor %s: %s", actor["name"], ref.Name)
}

// PrepareSpell implements [world.Dnd5e] with the module's `prepare-spell`,
// which checks no permission (reference §9.8): the relay refuses a user
// without OWNER on the actor first.
func (w rulesLinked) PrepareSpell(ctx context.Context, user *world.User, actorUUID, spellName string, prepared bool) (world.PrepareResult, error) {
	if actorUUID == "" {
		return world.PrepareResult{}, invalid("actorUuid is required")
	}
	if spellName == "" {
		return world.PrepareResult{}, invalid("spellName is required")
	}
	if err := w.requireLevel(ctx, user, actorUUID, world.LevelOwner, "prepare spells on"); err != nil {
		return world.PrepareResult{}, err
	}
	r, err := w.send(ctx, user, "prepare-spell", map[string]any{"actorUuid": actorUUID, "spellName": spellName, "prepared": prepared})
	if err != nil {
		return world.PrepareResult{}, err
	}
	var data struct {
		SpellName string `json:"spellName"`
		Prepared  bool   `json:"prepared"`
		UUID      string `json:"uuid"`
	}
	if err := w.data(r, "prepare-spell", &data); err != nil {
		return world.PrepareResult{}, err
	}
	// The module writes the field of dnd5e 4 and earlier
	// (`system.preparation.prepared`); dnd5e 5 reads `system.prepared`
	// (reference §3.13, §9.9), which the relay then writes too, as an
	// embedded world does.
	if systemMajor(w.hub, w.clientID) >= 5 && data.UUID != "" {
		value := 0
		if prepared {
			value = 1
		}
		if _, err := w.request(ctx, user, "update", map[string]any{"uuid": data.UUID, "data": map[string]any{"system.prepared": value}}); err != nil {
			return world.PrepareResult{}, err
		}
	}
	return world.PrepareResult{ActorUUID: actorUUID, SpellUUID: data.UUID, SpellName: data.SpellName, Prepared: data.Prepared}, nil
}

// systemMajor is the major version of the world's game system, as its
// connection reported it (0 when unknown).
func systemMajor(hub *Hub, clientID string) int {
	ci, ok := hub.Info(clientID)
	if !ok {
		return 0
	}
	major, _, _ := strings.Cut(ci.SystemVersion, ".")
	n, err := strconv.Atoi(major)
	if err != nil {
		return 0
	}
	return n
}

// Uses.

// useTypes are the module's request types of the use operations.
var useTypes = map[world.UseKind]string{
	world.UseAbility: "use-ability", world.UseFeature: "use-feature", world.UseSpell: "use-spell", world.UseItem: "use-item",
}

// diceReply is a roll's dice as the module reports them.
type diceReply []struct {
	Faces   int `json:"faces"`
	Results []struct {
		Result int   `json:"result"`
		Active *bool `json:"active"`
	} `json:"results"`
}

// dice converts the dice: each term's number is its count of results and
// its total the sum of the active ones (the module reports no modifiers).
func (d diceReply) dice() []dice.Die {
	out := make([]dice.Die, len(d))
	for i, term := range d {
		die := dice.Die{Number: len(term.Results), Faces: term.Faces, Modifiers: []string{}, Results: make([]dice.DieResult, len(term.Results))}
		for j, r := range term.Results {
			active := r.Active == nil || *r.Active
			die.Results[j] = dice.DieResult{Result: r.Result, Active: active}
			if active {
				die.Total += r.Result
			}
		}
		out[i] = die
	}
	return out
}

// shownResult writes a roll's terms with each dice term replaced by its
// total, as the dice engine shows a result (`1d20 + 4` rolled 14 is
// `14 + 4`).
func shownResult(formula string, ds []dice.Die) string {
	fields := strings.Fields(formula)
	next := 0
	for i, f := range fields {
		term, _, _ := strings.Cut(f, "[")
		n, faces, ok := strings.Cut(term, "d")
		if ok && faces != "" && isDigits(faces[:1]) && (n == "" || isDigits(n)) && next < len(ds) {
			fields[i] = fmt.Sprint(ds[next].Total)
			next++
		}
	}
	return strings.Join(fields, " ")
}

// isDigits reports whether s is a non-empty run of decimal digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Use implements [world.Dnd5e] with the module's `use-ability`,
// `use-feature`, `use-spell` and `use-item`. The module casts a spell at
// its own level only: a slot level is refused as not offered. It reports
// the attack and damage rolls only; whether the use started concentration
// is read from the item (see usedItem), while what it consumed, its
// target, its saving throw and whether the attack hit are not known
// (empty in the answer).
func (w rulesLinked) Use(ctx context.Context, user *world.User, p world.UseParams) (world.UseResult, error) {
	requestType := useTypes[p.Kind]
	if p.ActorUUID == "" {
		return world.UseResult{}, invalid("actorUuid is required")
	}
	if p.Ability.UUID == "" && p.Ability.Name == "" {
		return world.UseResult{}, invalid("abilityUuid or abilityName is required")
	}
	if p.SlotLevel != 0 {
		return world.UseResult{}, world.Errorf(world.ErrUnimplemented, "World '%s' does not offer dnd5e/%s with slotLevel", w.clientID, requestType)
	}
	actor, err := w.checkUse(ctx, user, p)
	if err != nil {
		return world.UseResult{}, err
	}
	params := map[string]any{"actorUuid": p.ActorUUID}
	param(params, "abilityUuid", p.Ability.UUID)
	param(params, "abilityName", p.Ability.Name)
	param(params, "targetUuid", p.TargetUUID)
	param(params, "targetName", p.TargetName)
	r, err := w.send(ctx, user, requestType, params)
	if err != nil {
		return world.UseResult{}, err
	}
	type rollData struct {
		Total      float64   `json:"total"`
		Formula    string    `json:"formula"`
		IsCritical bool      `json:"isCritical"`
		IsFumble   bool      `json:"isFumble"`
		Type       *string   `json:"type"`
		Dice       diceReply `json:"dice"`
	}
	var data struct {
		UUID        string     `json:"uuid"`
		Ability     string     `json:"ability"`
		Roll        *rollData  `json:"roll"`
		DamageRolls []rollData `json:"damageRolls"`
	}
	if err := w.data(r, requestType, &data); err != nil {
		return world.UseResult{}, err
	}
	result := func(d rollData) dice.Result {
		ds := d.Dice.dice()
		return dice.Result{Formula: d.Formula, Result: shownResult(d.Formula, ds), Total: d.Total, Dice: ds}
	}
	out := world.UseResult{ActorUUID: cmpOr(data.UUID, p.ActorUUID), Ability: data.Ability, Damage: []world.DamageRoll{}}
	if d := data.Roll; d != nil {
		out.Attack = &world.AttackRoll{Result: result(*d), IsCritical: d.IsCritical, IsFumble: d.IsFumble, Mode: modeOf(d.Formula, false, false)}
	}
	for _, d := range data.DamageRolls {
		dr := world.DamageRoll{Result: result(d), IsCritical: d.IsCritical}
		if d.Type != nil {
			dr.Type = *d.Type
		}
		out.Damage = append(out.Damage, dr)
	}
	usedItem(actor, p, &out)
	return out, nil
}

// useNouns name the use kinds in errors, as an embedded world does.
var useNouns = map[world.UseKind]string{world.UseAbility: "an ability", world.UseFeature: "a feature", world.UseSpell: "a spell", world.UseItem: "an item"}

// checkUse finds the item a use names as an embedded world does, before
// the module gets the use. The module takes an abilityUuid as it is, from
// any actor and of any type (reference §3.4): a user who owns one actor
// could use another's item, spending its uses. So, for an actor named by
// a world actor's uuid, the relay requires OWNER, an abilityUuid among
// that actor's items and of the use's kind, and an abilityName that names
// one, with the embedded world's texts. It returns the actor as it read
// it (nil for an actor it leaves to the module).
func (w rulesLinked) checkUse(ctx context.Context, user *world.User, p world.UseParams) (world.Document, error) {
	actor, ok, err := w.gmActor(ctx, p.ActorUUID)
	if err != nil || !ok {
		return nil, err
	}
	if err := levelError(user, actor, p.ActorUUID, world.LevelOwner, "use abilities on"); err != nil {
		return nil, err
	}
	if p.Ability.UUID != "" {
		it, err := findItem(p.ActorUUID, actor, world.ItemRef{UUID: p.Ability.UUID})
		if err != nil {
			return nil, err
		}
		if typ, _ := it["type"].(string); !kindAccepts(p.Kind, typ) {
			return nil, invalid("'%s' (%s) is not %s", it["name"], typ, useNouns[p.Kind])
		}
		return actor, nil
	}
	items, _ := actor["items"].([]any)
	for _, x := range items {
		it, _ := x.(map[string]any)
		typ, _ := it["type"].(string)
		if name, _ := it["name"].(string); strings.EqualFold(name, p.Ability.Name) && kindAccepts(p.Kind, typ) {
			return actor, nil
		}
	}
	return nil, world.Errorf(world.ErrNotFound, "Ability not found on actor %s: %s", actor["name"], p.Ability.Name)
}

// featureTypes are the item types the module's use-feature looks for
// (reference §3.4).
var featureTypes = []string{"feat", "class", "subclass", "background"}

// usedItem fills in what the actor's item tells about a use the module
// reported: the item's uuid, and whether the use started concentration (a
// spell with the concentration property, which the system concentrates on
// when it is cast). The item is the one asked for by uuid, else the first
// of the actor's items of the use's kind with the name the module used;
// the actor is as checkUse read it before the use (nil when it could not:
// both stay unknown).
func usedItem(actor world.Document, p world.UseParams, out *world.UseResult) {
	items, _ := actor["items"].([]any)
	for _, x := range items {
		it, _ := x.(map[string]any)
		itemID, _ := it["_id"].(string)
		name, _ := it["name"].(string)
		typ, _ := it["type"].(string)
		switch {
		case p.Ability.UUID != "" && p.ActorUUID+".Item."+itemID != p.Ability.UUID:
			continue
		case p.Ability.UUID == "" && (!strings.EqualFold(name, out.Ability) || !kindAccepts(p.Kind, typ)):
			continue
		}
		out.ItemUUID = p.ActorUUID + ".Item." + itemID
		props, _ := at(it, "system", "properties").([]any)
		out.Concentration = typ == "spell" && slices.Contains(props, any("concentration"))
		return
	}
}

// kindAccepts reports whether a use of kind k finds an item of type typ
// by name, as the module's filters do (reference §3.4).
func kindAccepts(k world.UseKind, typ string) bool {
	switch k {
	case world.UseFeature:
		return slices.Contains(featureTypes, typ)
	case world.UseSpell:
		return typ == "spell"
	case world.UseItem:
		return typ != "spell" && !slices.Contains(featureTypes, typ)
	}
	return true
}
