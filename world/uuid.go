package world

import (
	"crypto/rand"
	"strings"
)

// docType describes one kind of document: where it may live, which of its
// fields hold embedded documents and what creating one takes.
type docType struct {
	name string
	// topLevel documents live in a world collection (`Actor.<id>`).
	topLevel bool
	// embedded lists the fields of the source data that hold embedded
	// documents, e.g. an Actor's `items`.
	embedded []embeddedField
	// foldered documents can sit in a Folder of their type.
	foldered bool
	// owned documents carry an `ownership` map when they are top-level.
	owned bool
	// createPermission is the world permission a non-GM needs to create a
	// top-level document of this type; empty means GM only.
	createPermission string
	// nameRequired documents must have a non-empty `name`.
	nameRequired bool
}

// embeddedField is a field of a parent's source data that holds an array of
// embedded documents of one type.
type embeddedField struct {
	key string   // the field, e.g. "items"
	typ *docType // the embedded documents' type, e.g. Item
}

// The document types the world knows. Each type is one value, so a pointer
// comparison tells types apart.
var (
	typeActor            = &docType{name: "Actor", topLevel: true, embedded: []embeddedField{actorItems, actorEffects}, foldered: true, owned: true, createPermission: "ACTOR_CREATE", nameRequired: true}
	typeItem             = &docType{name: "Item", topLevel: true, embedded: []embeddedField{itemEffects}, foldered: true, owned: true, createPermission: "ITEM_CREATE", nameRequired: true}
	typeActiveEffect     = &docType{name: "ActiveEffect"}
	typeScene            = &docType{name: "Scene", topLevel: true, embedded: []embeddedField{sceneTokens}, foldered: true, owned: true, createPermission: "SCENE_CREATE", nameRequired: true}
	typeToken            = &docType{name: "Token"}
	typeJournalEntry     = &docType{name: "JournalEntry", topLevel: true, embedded: []embeddedField{journalPages}, foldered: true, owned: true, createPermission: "JOURNAL_CREATE", nameRequired: true}
	typeJournalEntryPage = &docType{name: "JournalEntryPage", nameRequired: true}
	typeMacro            = &docType{name: "Macro", topLevel: true, foldered: true, owned: true, createPermission: "MACRO_CREATE", nameRequired: true}
	typeFolder           = &docType{name: "Folder", topLevel: true, nameRequired: true}
	typeCombat           = &docType{name: "Combat", topLevel: true, embedded: []embeddedField{combatCombatants}}
	typeCombatant        = &docType{name: "Combatant"}
	typeUser             = &docType{name: "User", topLevel: true, nameRequired: true}
	typeChatMessage      = &docType{name: "ChatMessage", topLevel: true}
)

// The embedded collections.
var (
	actorItems       = embeddedField{"items", typeItem}
	actorEffects     = embeddedField{"effects", typeActiveEffect}
	itemEffects      = embeddedField{"effects", typeActiveEffect}
	sceneTokens      = embeddedField{"tokens", typeToken}
	journalPages     = embeddedField{"pages", typeJournalEntryPage}
	combatCombatants = embeddedField{"combatants", typeCombatant}
)

// docTypes indexes every type by its document name.
var docTypes = map[string]*docType{}

// folderedTypes lists, in display order, the types that can sit in folders.
var folderedTypes = []*docType{typeActor, typeItem, typeScene, typeJournalEntry, typeMacro}

func init() {
	for _, t := range []*docType{typeActor, typeItem, typeActiveEffect, typeScene, typeToken,
		typeJournalEntry, typeJournalEntryPage, typeMacro, typeFolder, typeCombat, typeCombatant,
		typeUser, typeChatMessage} {
		docTypes[t.name] = t
	}
}

// field returns the field of t that holds embedded documents named name.
func (t *docType) field(name string) (embeddedField, bool) {
	for _, f := range t.embedded {
		if f.typ.name == name {
			return f, true
		}
	}
	return embeddedField{}, false
}

// isEmbeddedKey reports whether key is one of t's embedded collections.
func (t *docType) isEmbeddedKey(key string) bool {
	for _, f := range t.embedded {
		if f.key == key {
			return true
		}
	}
	return false
}

// segment is one `<DocumentName>.<id>` step of a uuid.
type segment struct {
	typ   *docType
	field string // the parent's field holding this document; empty at top level
	id    string
}

// ref is a parsed uuid: the top-level document first, then each embedded
// step. A ref always has at least one segment.
type ref struct {
	uuid string
	segs []segment
}

// typ is the type of the document the ref addresses.
func (r ref) typ() *docType { return r.segs[len(r.segs)-1].typ }

// id is the id of the document the ref addresses.
func (r ref) id() string { return r.segs[len(r.segs)-1].id }

// top is the key of the top-level document the ref lives in.
func (r ref) top() docKey { return docKey{r.segs[0].typ, r.segs[0].id} }

// embedded reports whether the ref addresses an embedded document.
func (r ref) embedded() bool { return len(r.segs) > 1 }

// parent is the ref of the document holding an embedded one.
func (r ref) parent() ref {
	last := r.segs[len(r.segs)-1]
	return ref{
		uuid: strings.TrimSuffix(r.uuid, "."+last.typ.name+"."+last.id),
		segs: r.segs[:len(r.segs)-1],
	}
}

// child returns the ref of an embedded document of the one r addresses.
func (r ref) child(f embeddedField, id string) ref {
	segs := make([]segment, len(r.segs), len(r.segs)+1)
	copy(segs, r.segs)
	return ref{
		uuid: r.uuid + "." + f.typ.name + "." + id,
		segs: append(segs, segment{typ: f.typ, field: f.key, id: id}),
	}
}

// docKey identifies a top-level document.
type docKey struct {
	typ *docType
	id  string
}

// uuid returns the key's uuid.
func (k docKey) uuid() string { return k.typ.name + "." + k.id }

// parseUUID parses a document uuid such as `Actor.<id>.Item.<id>`. Every id
// must be well formed and every step must be a collection its parent holds.
// An odd number of dots means name/id pairs, so together with the id check
// no empty or dangling step can slip through.
func parseUUID(uuid string) (ref, error) {
	bad := func() (ref, error) { return ref{}, Errorf(ErrInvalid, "Invalid uuid: %s", uuid) }
	// Count the steps first so the segments need a single allocation.
	dots := strings.Count(uuid, ".")
	if dots%2 == 0 {
		return bad()
	}
	segs := make([]segment, 0, (dots+1)/2)
	rest := uuid
	var parent *docType
	for rest != "" {
		name, after, ok := strings.Cut(rest, ".")
		if !ok {
			return bad()
		}
		id, next, _ := strings.Cut(after, ".")
		if !validID(id) {
			return bad()
		}
		seg := segment{id: id}
		if parent == nil {
			t := docTypes[name]
			if t == nil || !t.topLevel {
				return bad()
			}
			seg.typ = t
		} else {
			f, ok := parent.field(name)
			if !ok {
				return bad()
			}
			seg.typ, seg.field = f.typ, f.key
		}
		segs = append(segs, seg)
		parent = seg.typ
		rest = next
	}
	return ref{uuid: uuid, segs: segs}, nil
}

// idLength is the length of every document id.
const idLength = 16

// validID reports whether id is a well-formed document id: 16 letters and
// digits.
func validID(id string) bool {
	if len(id) != idLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if !isAlnum(id[i]) {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// idAlphabet holds the characters of generated ids.
const idAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

// randomID returns a fresh random document id drawn from crypto/rand. Bytes
// of 248 and above are skipped so every letter is equally likely.
func randomID() string {
	var out [idLength]byte
	var buf [2 * idLength]byte
	n := 0
	for n < idLength {
		rand.Read(buf[:]) // never fails (crypto/rand panics rather than return an error)
		for _, b := range buf {
			if b >= 248 {
				continue
			}
			out[n] = idAlphabet[int(b)%len(idAlphabet)]
			if n++; n == idLength {
				break
			}
		}
	}
	return string(out[:])
}
