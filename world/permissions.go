package world

import (
	"cmp"
	"slices"
	"strings"
)

// This file holds the permission rules: who a user is, what level a user has
// on a document, what a read at each level shows, and the wording of the
// permission errors (which follows the tabletop module's, reference §2.4).

// userIndex finds users by id and by case-insensitive name. It is built
// from the User collection whenever that changes and is immutable after.
type userIndex struct {
	byID   map[string]User
	byName map[string]User // lower-case name; the lowest id wins a tie
	sorted []User          // by name, then id
}

// buildUserIndex indexes the User documents.
func buildUserIndex(users *docTable) *userIndex {
	ix := &userIndex{byID: make(map[string]User, users.len()), byName: make(map[string]User, users.len())}
	users.each(func(id string, doc Document) bool {
		role, _ := number(doc["role"])
		u := User{ID: id, Name: docName(doc), Role: Role(role)}
		ix.byID[id] = u
		ix.sorted = append(ix.sorted, u)
		return true
	})
	slices.SortFunc(ix.sorted, func(a, b User) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
	for _, u := range ix.sorted {
		key := strings.ToLower(u.Name)
		if old, ok := ix.byName[key]; !ok || u.ID < old.ID {
			ix.byName[key] = u
		}
	}
	return ix
}

// resolve finds a user by id, then by case-insensitive name.
func (ix *userIndex) resolve(idOrName string) (*User, error) {
	if idOrName == "" {
		return nil, Errorf(ErrInvalid, "'userId' is required")
	}
	u, ok := ix.byID[idOrName]
	if !ok {
		u, ok = ix.byName[strings.ToLower(idOrName)]
	}
	if !ok {
		return nil, Errorf(ErrInvalid, "User not found: %s", idOrName)
	}
	return &u, nil
}

// can reports whether user holds a world permission: when the role reaches
// the role the world maps the permission to, or, for a permission the world
// does not map, when the user is a GM. The nil user holds every permission.
func can(perms map[string]Role, user *User, permission string) bool {
	if user == nil {
		return true
	}
	role, ok := perms[permission]
	if !ok {
		return user.IsGM()
	}
	return user.Role >= role
}

// levelOf returns user's level on a top-level document of type t. A GM (or
// the nil user) is OWNER. Otherwise the document's `ownership` decides: the
// user's own entry, else `default`, else NONE (a negative entry means
// "inherit" and falls through). Documents without an `ownership` map follow
// the tabletop's rules for their type:
//
//   - Folder: LIMITED (everyone sees folder names; structure hides folders
//     holding nothing the user can see);
//   - Combat: OBSERVER (everyone sees the combat tracker);
//   - User: OBSERVER on one's own user, LIMITED on others;
//   - ChatMessage: OBSERVER when public or whispered to the user, else
//     NONE; OWNER for its author, except that the author of a blind
//     message (whispered with `blind` set, as a blind roll is) who is not
//     among its recipients is LIMITED: they may know it exists, not read
//     its content;
//   - anything else: NONE.
//
// Embedded documents have the level of their top-level document.
func levelOf(user *User, t *docType, top Document) Level {
	if user.IsGM() {
		return LevelOwner
	}
	if own, ok := top["ownership"].(map[string]any); ok {
		if l, ok := number(own[user.ID]); ok && l >= 0 {
			return Level(l)
		}
		if l, ok := number(own["default"]); ok && l >= 0 {
			return Level(l)
		}
		return LevelNone
	}
	switch t {
	case typeFolder:
		return LevelLimited
	case typeCombat:
		return LevelObserver
	case typeUser:
		if top["_id"] == user.ID {
			return LevelObserver
		}
		return LevelLimited
	case typeChatMessage:
		return chatMessageLevel(user, top)
	}
	return LevelNone
}

// chatMessageLevel applies the tabletop's visibility of chat messages.
func chatMessageLevel(user *User, msg Document) Level {
	author := str(msg["author"])
	if author == "" {
		author = str(msg["user"]) // the field's name before tabletop version 12
	}
	whisper, _ := msg["whisper"].([]any)
	recipient := slices.Contains(whisper, any(user.ID))
	if author == user.ID {
		// As in the tabletop, blind applies only to a whispered message.
		if msg["blind"] == true && len(whisper) > 0 && !recipient {
			return LevelLimited
		}
		return LevelOwner
	}
	if len(whisper) == 0 || recipient {
		return LevelObserver
	}
	return LevelNone
}

// limitedData is what a LIMITED reader sees of a document: exactly its
// name, uuid, document name (as `type`) and image (null when absent).
func limitedData(t *docType, uuid string, doc Document) Document {
	img, ok := doc["img"]
	if !ok {
		img = nil
	}
	return Document{"name": doc["name"], "uuid": uuid, "type": t.name, "img": img}
}

// fullData is what an OBSERVER or OWNER reader sees: a private copy of the
// source data with the document's uuid added.
func fullData(uuid string, doc Document) Document {
	out := deepCopyMap(doc)
	out["uuid"] = uuid
	return out
}

// displayName names a document in an error: its name, else its uuid.
func displayName(uuid string, doc Document) string {
	if n := docName(doc); n != "" {
		return n
	}
	if uuid != "" {
		return uuid
	}
	return "unknown"
}

// errNoWrite is the error for a write without OWNER, in the tabletop
// module's words: `User '<name>' does not have permission to <operation> '<doc>'`.
func errNoWrite(user *User, operation, uuid string, doc Document) error {
	return Errorf(ErrPermission, "User '%s' does not have permission to %s '%s'", user.Name, operation, displayName(uuid, doc))
}

// errNoView is the error for a single read at level NONE.
func errNoView(user *User) error {
	return Errorf(ErrPermission, "User '%s' does not have permission to view this entity", user.Name)
}

// requireGM fails unless user is a GM: `User '<name>' must be a GM to <operation>`.
func requireGM(user *User, operation string) error {
	if user.IsGM() {
		return nil
	}
	return Errorf(ErrPermission, "User '%s' must be a GM to %s", user.Name, operation)
}
