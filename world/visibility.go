package world

import (
	"reflect"
	"strings"
)

// This file is the one place that decides what a user may see of a
// document, whatever the door: a single read (`/get`), a lookup by name, a
// roll formula's reference, an error message naming the document. Every
// operation that hands out data about a document, or finds one for a user,
// goes through readLevel, so that the read rules hold the same way
// everywhere:
//
//   - the ownership level (levelOf): NONE hides the document, LIMITED shows
//     its `name`, `uuid`, `type` and `img`, OBSERVER and OWNER everything;
//   - a folder without an `ownership` of its own is seen by a non-GM only
//     when something in it is (the tabletop's sidebar rule, which the
//     folder structure follows too); one with an `ownership` follows it;
//   - a hidden combatant is seen by GMs and by the owners of its actor only,
//     and a combat read by anyone else leaves it out.

// readLevel is the level at which user reads the document r addresses
// (top is its top-level document, doc the document itself): the ownership
// level, lowered to NONE for a folder or a combatant the user cannot see.
func (v *View) readLevel(user *User, r ref, top, doc Document) Level {
	level := levelOf(user, r.segs[0].typ, top)
	if user.IsGM() || level == LevelNone {
		return level
	}
	switch r.typ() {
	case typeFolder:
		if !v.folderVisible(user, doc, map[string]bool{}) {
			return LevelNone
		}
	case typeCombatant:
		if !v.combatantVisible(user, doc) {
			return LevelNone
		}
	}
	return level
}

// readAs returns what user may see of a document already looked up, as a
// private copy: the full data with its `uuid` (OBSERVER, OWNER), the four
// LIMITED keys, or the permission error of a single read (NONE).
func (v *View) readAs(user *User, r ref, top, doc Document) (Document, error) {
	switch v.readLevel(user, r, top, doc) {
	case LevelNone:
		return nil, errNoView(user)
	case LevelLimited:
		return limitedData(r.typ(), r.uuid, doc), nil
	}
	out := fullData(r.uuid, doc)
	if r.typ() == typeCombat && !user.IsGM() {
		out[combatCombatants.key] = v.visibleCombatants(user, docsOf(out, combatCombatants.key))
	}
	return out, nil
}

// before returns a view of the world as a transaction found it, without
// its own changes.
func (tx *Tx) before() *View { return &View{snap: tx.base} }

// needsView reports whether what a non-GM may read of a document of type t
// depends on more than its top-level document's ownership, so that a read
// must go through readAs rather than a shortcut on the level alone.
func needsView(t *docType) bool {
	return t == typeFolder || t == typeCombat || t == typeCombatant
}

// folderVisible reports whether a non-GM user sees a folder: by its own
// `ownership` when it has one, else when a document the user sees (at least
// LIMITED) sits in it or in a folder below it that the user sees. seen
// guards against parent cycles in damaged data.
func (v *View) folderVisible(user *User, folder Document, seen map[string]bool) bool {
	if user.IsGM() {
		return true
	}
	if _, own := folder["ownership"].(map[string]any); own {
		return levelOf(user, typeFolder, folder) >= LevelLimited
	}
	id := str(folder["_id"])
	if seen[id] {
		return false
	}
	seen[id] = true
	found := false
	if t := foldered(str(folder["type"])); t != nil {
		v.each(t, func(doc Document) bool {
			found = doc["folder"] == id && levelOf(user, t, doc) >= LevelLimited
			return !found
		})
	}
	if !found {
		v.each(typeFolder, func(child Document) bool {
			found = child["folder"] == id && v.folderVisible(user, child, seen)
			return !found
		})
	}
	return found
}

// combatantVisible reports whether a non-GM user sees a combatant: one that
// is not hidden, or whose actor the user owns.
func (v *View) combatantVisible(user *User, c Document) bool {
	if c["hidden"] != true || user.IsGM() {
		return true
	}
	actorID := str(c["actorId"])
	if actorID == "" {
		return false
	}
	actor := v.top(docKey{typeActor, actorID})
	return actor != nil && levelOf(user, typeActor, actor) >= LevelOwner
}

// visibleCombatants returns the combatants of a combat that user sees, in
// their order.
func (v *View) visibleCombatants(user *User, list []any) []any {
	out := make([]any, 0, len(list))
	for _, d := range list {
		if c, _ := d.(map[string]any); c != nil && v.combatantVisible(user, c) {
			out = append(out, c)
		}
	}
	return out
}

// ReadLevel returns the level at which user reads the document a uuid
// addresses: its permission level (see [View.Level]), except that a folder
// or a hidden combatant the user cannot see is NONE. Operations that hand
// out data about a document, or look one up for a user, decide with it.
func (v *View) ReadLevel(user *User, uuid string) (Level, error) {
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return LevelNone, err
	}
	return v.readLevel(user, r, top, doc), nil
}

// CanSee reports whether user sees the document a uuid addresses at all
// (LIMITED or more, see [View.ReadLevel]). A malformed uuid or a missing
// document is not seen. Lookups by name consider only what CanSee accepts,
// so that an invisible document is "not found" exactly like a missing one.
func (v *View) CanSee(user *User, uuid string) bool {
	level, err := v.ReadLevel(user, uuid)
	return err == nil && level >= LevelLimited
}

// RequireLevel fails with ErrPermission unless user reads the document a
// uuid addresses at need or above. The message names the document only when
// the user may see its name: `User '<n>' does not have permission to
// <operation> '<name>'`; for a document the user cannot see at all it is
// the single read's `User '<n>' does not have permission to view this
// entity`. An unknown document is ErrNotFound.
func (v *View) RequireLevel(user *User, uuid string, need Level, operation string) error {
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return err
	}
	switch level := v.readLevel(user, r, top, doc); {
	case level >= need:
		return nil
	case level == LevelNone:
		return errNoView(user)
	default:
		return Errorf(ErrPermission, "User '%s' does not have permission to %s '%s'", user.Name, operation, displayName(r.uuid, doc))
	}
}

// nameFor names a document in an error for user: its name when the user
// may see it, else the uuid the caller gave (which tells them nothing new).
func (v *View) nameFor(user *User, r ref, top, doc Document) string {
	if v.readLevel(user, r, top, doc) >= LevelLimited {
		return displayName(r.uuid, doc)
	}
	return r.uuid
}

// requireOwner applies the write rule to a document already looked up.
// The error names the document only when the user may see it.
func (v *View) requireOwner(user *User, r ref, top, doc Document, operation string) error {
	if levelOf(user, r.segs[0].typ, top) < LevelOwner {
		return Errorf(ErrPermission, "User '%s' does not have permission to %s '%s'", user.Name, operation, v.nameFor(user, r, top, doc))
	}
	return nil
}

// checkWrite enforces what a non-GM may not do with a document even as its
// owner, comparing the stored version before a write (cur) with the one the
// write made (next): change its `ownership` or its `type`, or put it in a
// folder the user cannot see. Any folder a write puts a top-level document
// in must exist and hold documents of its type, for GMs too. v is the world
// as it was before the write: a folder is judged as the user saw it, not
// with the document already in it. Callers run checkWrite inside the
// write's transaction, so that a refusal leaves nothing changed.
func (v *View) checkWrite(user *User, r ref, cur, next Document) error {
	if !user.IsGM() {
		if !reflect.DeepEqual(cur["ownership"], next["ownership"]) {
			return errNoWrite(user, "change the ownership of", r.uuid, cur)
		}
		if !reflect.DeepEqual(cur["type"], next["type"]) {
			return errNoWrite(user, "change the type of", r.uuid, cur)
		}
	}
	if r.embedded() || reflect.DeepEqual(cur["folder"], next["folder"]) {
		return nil
	}
	t := r.typ()
	if t != typeFolder && !t.foldered {
		return nil
	}
	id, ok := next["folder"].(string)
	if !ok && next["folder"] != nil {
		return Errorf(ErrInvalid, "'folder' must be a folder id or null")
	}
	holds := t.name
	if t == typeFolder {
		holds = str(cur["type"])
	}
	return v.usableFolder(user, id, holds)
}

// usableFolder checks a folder a user puts a document (holding documents of
// type holds) in: "" is the root; otherwise the folder must exist, hold
// that type and, for a non-GM, be one the user sees. A folder the user
// cannot see is answered exactly as a missing one, so that trying ids
// tells a player nothing about the folders hidden from them.
func (v *View) usableFolder(user *User, id, holds string) error {
	if id == "" {
		return nil
	}
	// Visibility first: what a folder holds is not for those who cannot
	// see it.
	if folder := v.top(docKey{typeFolder, id}); folder != nil && !v.folderVisible(user, folder, map[string]bool{}) {
		return errFolderNotFound(id)
	}
	_, err := folderOf(v, id, holds)
	return err
}

// ReadRef resolves a roll formula's reference to another document's data,
// `@<uuid>.<path>` (written without the `@`: "Actor.<id>.system.attributes.hp.value"),
// for user. isDoc is false, and nothing else is set, when ref does not
// start with a document uuid (it is then a path into the roller's own roll
// data). Otherwise the document must exist (ErrNotFound) and user must read
// it in full, at OBSERVER or above: anything less is ErrPermission, never a
// silent 0. The value is the one at path in the document's source data, as
// [View.Read] shows it (nil when absent); it is shared and must not be
// changed.
func (v *View) ReadRef(user *User, ref string) (value any, isDoc bool, err error) {
	parts := strings.Split(ref, ".")
	t := docTypes[parts[0]]
	if t == nil || !t.topLevel || len(parts) < 2 {
		return nil, false, nil
	}
	// The uuid runs as long as its steps name embedded documents of the
	// document before; the rest is the path.
	n := 2
	for cur := t; n+1 < len(parts); n += 2 {
		f, ok := cur.field(parts[n])
		if !ok {
			break
		}
		cur = f.typ
	}
	uuid, path := strings.Join(parts[:n], "."), strings.Join(parts[n:], ".")
	r, top, doc, err := v.find(uuid)
	if err != nil {
		return nil, true, err
	}
	if v.readLevel(user, r, top, doc) < LevelObserver {
		return nil, true, Errorf(ErrPermission, "User '%s' does not have permission to read @%s in a roll formula", user.Name, ref)
	}
	value, _ = Property(doc, path)
	return value, true, nil
}
