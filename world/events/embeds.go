package events

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// An event is about one document (its subject, event.Access), but its
// payload may carry data of other documents: a chat message posted by a
// roll speaks for an actor and shows that actor's rolls, and may name the
// roll's target; a token of an unlinked actor holds that actor's changed
// data in its `delta`. A reader must not learn through an event what they
// could not read of those documents either, so each event lists them
// (event.Embeds) with what it carries of each, and a reader's payload is
// worked out from their level on the subject and on every embedded
// document (event.viewFor).
//
// The embedded documents are judged as they were when the event happened,
// like the subject: their access fields are kept with the event, in memory
// and in the journal, so that live delivery and a resume, even after a
// restart, apply the same rules.

// embed is a document other than its subject whose data an event's payload
// carries.
type embed struct {
	// Access is the embedded document's top-level document as it was at
	// the time of the event. An empty access (a document the hub could not
	// find) is NONE to every reader but GMs.
	Access access `json:"acc"`
	// Need says what the payload carries of the document.
	Need need `json:"need"`
	// Strip, for needPart, are the places in the payload that hold the
	// document's data.
	Strip []strip `json:"strip,omitempty"`
}

// need says what a payload carries of an embedded document, and so what a
// reader must hold on it.
type need string

const (
	// needSource: the payload is the document's data (a chat message
	// speaking for an actor). A reader's level on the event is at most
	// their level on the document: NONE gets nothing, LIMITED the LIMITED
	// payload, OBSERVER and OWNER the whole payload.
	needSource need = "source"
	// needName: the payload names the document (a roll's target), as a
	// LIMITED reader may see it. A reader with NONE on it gets nothing.
	needName need = "name"
	// needPart: parts of the payload (Strip) are the document's data (an
	// unlinked token's `delta`). They are removed for a reader below
	// OBSERVER on it.
	needPart need = "part"
)

// strip is a place in a payload holding an embedded document's data: keys
// of the object found by following Path from the payload's root (object
// keys, and indexes into arrays).
type strip struct {
	Path []string `json:"path"`
	Keys []string `json:"keys"`
	// Required is set when the object holds nothing else worth sending
	// (the changes of an update): a reader left with an empty object gets
	// no event at all.
	Required bool `json:"req,omitempty"`
}

// payloadView names one of an event's payloads: every subscriber given the
// same view receives the same bytes.
type payloadView int

const (
	viewFull    payloadView = iota // GMs, and readers of an event without a player payload
	viewPlayer                     // OBSERVER and OWNER readers when GM-only details were removed
	viewLimited                    // LIMITED readers
)

// viewFor returns what user may receive of ev (nil for nothing), the same
// bytes for every reader receiving exactly that payload. It
// applies the read rules to the event's subject and to every document its
// payload embeds: NONE sees nothing, LIMITED the limited payload, OBSERVER
// and OWNER the whole payload without GM-only details, without the parts
// that belong to embedded documents the reader may not see.
func (ev *event) viewFor(user *world.User) json.RawMessage {
	if user.IsGM() {
		return ev.Full
	}
	if ev.GMOnly {
		return nil
	}
	level := world.LevelOf(user, ev.Access.Type, ev.Access.Doc)
	var buf [8]int
	hidden := buf[:0] // the needPart embeds the reader may not see
	for i := range ev.Embeds {
		if level == world.LevelNone {
			return nil
		}
		em := &ev.Embeds[i]
		l := world.LevelOf(user, em.Access.Type, em.Access.Doc)
		switch em.Need {
		case needSource:
			level = min(level, l)
		case needName:
			if l < world.LevelLimited {
				level = world.LevelNone
			}
		case needPart:
			if l < world.LevelObserver {
				hidden = append(hidden, i)
			}
		default:
			// A need this hub does not know (a newer relay's journal):
			// nothing of the event, rather than too much.
			level = world.LevelNone
		}
	}
	var data json.RawMessage
	view := viewFull
	switch level {
	case world.LevelNone:
		return nil
	case world.LevelLimited:
		data, view = ev.Limited, viewLimited
	default:
		data = ev.Full
		if ev.Player != nil {
			data, view = ev.Player, viewPlayer
		}
	}
	if data == nil {
		return nil
	}
	if len(hidden) == 0 {
		return data
	}
	return ev.variant(view, data, hidden)
}

// variantKey names a payload with parts removed: the payload view it is
// made from and which embeds' parts are removed (a bit per embed).
type variantKey struct {
	view   payloadView
	hidden string
}

// variant is a payload with parts removed.
type variant struct {
	data json.RawMessage // nil: nothing is left to send
}

// variant returns the payload view data of ev without the parts of the
// embeds hidden, made once and shared by every reader who receives the
// same: readers are told apart by what they receive, not by who they are,
// so fan-out still builds each distinct payload once.
func (ev *event) variant(view payloadView, data json.RawMessage, hidden []int) json.RawMessage {
	bits := make([]byte, hidden[len(hidden)-1]/8+1)
	for _, i := range hidden {
		bits[i/8] |= 1 << (i % 8)
	}
	key := variantKey{view: view, hidden: string(bits)}
	ev.vmu.Lock()
	defer ev.vmu.Unlock()
	v := ev.variants[key]
	if v == nil {
		v = &variant{data: stripParts(data, ev.Embeds, hidden)}
		if ev.variants == nil {
			ev.variants = map[variantKey]*variant{}
		}
		ev.variants[key] = v
	}
	return v.data
}

// stripParts returns data without the parts of the hidden embeds; nil when
// nothing worth sending is left, or when data cannot be read (nothing
// rather than too much).
func stripParts(data json.RawMessage, embeds []embed, hidden []int) json.RawMessage {
	var root any
	if err := json.Unmarshal(data, &root); err != nil {
		return nil
	}
	for _, i := range hidden {
		for _, s := range embeds[i].Strip {
			obj := follow(root, s.Path)
			if obj == nil {
				continue
			}
			had := len(obj) > 0
			for _, k := range s.Keys {
				delete(obj, k)
			}
			if s.Required && had && len(obj) == 0 {
				return nil
			}
		}
	}
	out, err := world.EncodeJSON(root)
	if err != nil {
		return nil
	}
	return out
}

// follow returns the object at path in a decoded JSON value, or nil.
func follow(v any, path []string) map[string]any {
	for _, step := range path {
		switch node := v.(type) {
		case map[string]any:
			v = node[step]
		case []any:
			i, err := strconv.Atoi(step)
			if err != nil || i < 0 || i >= len(node) {
				return nil
			}
			v = node[i]
		default:
			return nil
		}
	}
	obj, _ := v.(map[string]any)
	return obj
}

// accessAt returns the access of the top-level document holding uuid as
// the transaction left it: from the transaction's own changes, else from
// the world's state. It is empty (NONE to all but GMs) when the document
// cannot be found.
func (b *builder) accessAt(uuid string) access {
	path := parsePath(uuid)
	if path == nil {
		return access{}
	}
	top := path.uuidOf(1)
	if c := b.changes[top]; c != nil {
		doc := c.After
		if doc == nil {
			doc = c.Before
		}
		return accessOf(path[0].name, doc)
	}
	if b.state != nil {
		if doc, err := b.state.Get(top); err == nil {
			return accessOf(path[0].name, doc)
		}
	}
	return access{}
}

// chatEmbeds are the documents a chat message carries data of: the actor
// it speaks for (`speaker.actor`), whose rolls, items and numbers its
// content, flavor, rolls and flags show; and the targets it names
// (`flags.dnd5e.targets`, as the fifth-edition rules record them).
func (b *builder) chatEmbeds(msg world.Document) []embed {
	var out []embed
	if speaker, _ := msg["speaker"].(map[string]any); speaker != nil {
		if id, _ := speaker["actor"].(string); id != "" {
			if !strings.HasPrefix(id, "Actor.") {
				id = "Actor." + id
			}
			out = append(out, embed{Access: b.accessAt(id), Need: needSource})
		}
	}
	targets, _ := world.Property(msg, "flags.dnd5e.targets")
	list, _ := targets.([]any)
	for _, t := range list {
		uuid, _ := t.(string)
		if m, ok := t.(map[string]any); ok {
			uuid, _ = m["uuid"].(string)
		}
		if uuid != "" {
			out = append(out, embed{Access: b.accessAt(uuid), Need: needName})
		}
	}
	return out
}

// tokenEmbeds are the documents a token in a payload carries data of: its
// actor, when the token holds the actor's changed data (`delta`, for an
// unlinked token). token is the token's document; changes, for an update,
// the changed fields at path in the payload (nil for a whole token at
// path).
func (b *builder) tokenEmbeds(token world.Document, changes map[string]any, path ...string) []embed {
	s := strip{Path: path, Keys: []string{"delta"}}
	if changes != nil {
		_, changed := changes["delta"]
		_, removed := changes["-=delta"]
		if !changed && !removed {
			return nil
		}
		s = strip{Path: path, Keys: []string{"delta", "-=delta"}, Required: true}
	} else if _, ok := token["delta"]; !ok {
		return nil
	}
	return []embed{b.actorPart(token, s)}
}

// actorPart is the embed of a token's actor for a part of a payload; a
// token without an actor has its own `delta`, which belongs to no actor
// anyone may see.
func (b *builder) actorPart(token world.Document, s ...strip) embed {
	var acc access
	if id, _ := token["actorId"].(string); id != "" {
		acc = b.accessAt("Actor." + id)
	}
	return embed{Access: acc, Need: needPart, Strip: s}
}

// sceneEmbeds are the documents a whole scene at path in a payload carries
// data of: the actors of its tokens that hold actor data, one embed per
// actor.
func (b *builder) sceneEmbeds(scene world.Document, path ...string) []embed {
	var out []embed
	var actors []string
	tokens, _ := scene["tokens"].([]any)
	for i, t := range tokens {
		token, _ := t.(map[string]any)
		if _, ok := token["delta"]; !ok {
			continue
		}
		s := strip{Path: append(slices.Clip(path), "tokens", strconv.Itoa(i)), Keys: []string{"delta"}}
		id, _ := token["actorId"].(string)
		if j := slices.Index(actors, id); j >= 0 && id != "" {
			out[j].Strip = append(out[j].Strip, s)
			continue
		}
		actors = append(actors, id)
		out = append(out, b.actorPart(token, s))
	}
	return out
}

// loaded fixes up an event read back from the journal. Events written by
// a hub older than embeds (Format below 2) do not say which other
// documents they carry: the kinds that may carry some (chat messages,
// tokens, new scenes with their tokens) reach GMs only, so that a resume
// across an upgrade reveals nothing the reader may not see.
func (ev *event) loaded() {
	if ev.Format >= eventFormat {
		return
	}
	switch ev.Name {
	case "createChatMessage", "updateChatMessage", "deleteChatMessage",
		"createToken", "updateToken", "createScene",
		"scene-token-create", "scene-token-update":
		ev.GMOnly = true
	}
}
