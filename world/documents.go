package world

import (
	"context"
	"maps"
	"slices"
)

// Get returns a document as user may see it: the full source data plus a
// `uuid` key (OBSERVER, OWNER), the four LIMITED keys (LIMITED), or a
// permission error (NONE). The result is the caller's to change.
func (e *Engine) Get(ctx context.Context, user *User, uuid string) (Document, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	if uuid == "" {
		return nil, Errorf(ErrInvalid, "'uuid' is required")
	}
	return e.view().Read(user, uuid)
}

// Create creates a document and returns it as Get would (with its `uuid`).
//
// A top-level document needs, for a non-GM user, the world permission of
// its type (ACTOR_CREATE, ITEM_CREATE, SCENE_CREATE, JOURNAL_CREATE,
// MACRO_CREATE; other types are GM only), and a non-GM creator becomes its
// sole owner: `ownership` becomes {"default": 0, <user>: 3}. Setting an
// `ownership` is for GMs only: a non-GM's data holding one (top-level or
// embedded, in any form) is refused. An embedded document (with ParentUUID)
// needs OWNER on the parent. `_id` is kept only with KeepID; `_stats` is
// always fresh. A folder, given in Folder or in the data's `folder`, must
// exist, hold documents of the new document's type and, for a non-GM, be
// a folder the user sees.
func (e *Engine) Create(ctx context.Context, user *User, p CreateParams) (Document, error) {
	if p.Type == "" {
		return nil, Errorf(ErrInvalid, "'entityType' is required")
	}
	t := docTypes[p.Type]
	if t == nil {
		return nil, Errorf(ErrInvalid, "Invalid entity type: %s", p.Type)
	}
	if p.Data == nil {
		return nil, Errorf(ErrInvalid, "'data' must be an object")
	}
	if p.ParentUUID == "" {
		if !t.topLevel {
			return nil, Errorf(ErrInvalid, "%s documents can only be created inside a parent document", t.name)
		}
		if !user.IsGM() && (t.createPermission == "" || !e.Can(user, t.createPermission)) {
			return nil, Errorf(ErrPermission, "User '%s' does not have permission to create %s documents", user.Name, t.name)
		}
	} else if p.Folder != "" {
		return nil, Errorf(ErrInvalid, "'folder' applies only to top-level documents")
	}
	if !user.IsGM() && touchesOwnership(p.Data) {
		return nil, Errorf(ErrPermission, "User '%s' does not have permission to set the ownership of a new %s document: only a GM may set ownership", user.Name, t.name)
	}
	data := maps.Clone(p.Data) // top-level keys change below; the caller's map must not
	if !p.KeepID {
		delete(data, "_id")
	}
	var out Document
	err := e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		if p.ParentUUID != "" {
			r, top, doc, err := v.find(p.ParentUUID)
			if err != nil {
				return err
			}
			if err := v.requireOwner(user, r, top, doc, "create embedded documents on"); err != nil {
				return err
			}
		} else {
			if err := placeInFolder(v, user, t, data, p.Folder); err != nil {
				return err
			}
			if t.owned {
				if !user.IsGM() {
					data["ownership"] = Document{"default": float64(LevelNone), user.ID: float64(LevelOwner)}
				} else if _, ok := data["ownership"].(map[string]any); !ok {
					data["ownership"] = Document{"default": float64(LevelNone)}
				}
			}
		}
		uuid, err := tx.Create(t.name, p.ParentUUID, data)
		if err != nil {
			return err
		}
		if out, err = tx.Get(uuid); err != nil {
			return err
		}
		out["uuid"] = uuid
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// placeInFolder sets the `folder` of a new top-level document's data: the
// folder given as a parameter wins over the data's own. The folder must
// exist, hold documents of the document's type (for a new folder, the
// parent must hold the same type as the new folder) and be one the user
// sees.
func placeInFolder(v *View, user *User, t *docType, data Document, param string) error {
	if t != typeFolder && !t.foldered {
		if param != "" {
			return Errorf(ErrInvalid, "'folder' does not apply to %s documents", t.name)
		}
		return nil
	}
	folderID := param
	if folderID == "" {
		folderID = str(data["folder"])
	}
	if folderID == "" {
		data["folder"] = nil
		return nil
	}
	holds := t.name
	if t == typeFolder {
		holds = str(data["type"])
	}
	if err := v.usableFolder(user, folderID, holds); err != nil {
		return err
	}
	data["folder"] = folderID
	return nil
}

// Delete deletes a document (with its embedded documents). The user needs
// OWNER. Deleting a folder this way moves its documents and sub-folders up
// to its own parent folder; [Engine.DeleteFolder] can delete them instead.
func (e *Engine) Delete(ctx context.Context, user *User, uuid string) error {
	if uuid == "" {
		return Errorf(ErrInvalid, "'uuid' is required")
	}
	return e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		r, top, doc, err := v.find(uuid)
		if err != nil {
			return err
		}
		if err := v.requireOwner(user, r, top, doc, "delete"); err != nil {
			return err
		}
		if r.typ() == typeFolder {
			if err := moveFolderContents(tx, r.id(), doc["folder"]); err != nil {
				return err
			}
		}
		if err := removeCombatantsOf(tx, r); err != nil {
			return err
		}
		return tx.Delete(uuid)
	})
}

// removeCombatantsOf removes, from every combat, the combatants that stand
// for a document being deleted: an actor's, a token's, or those of a
// scene's tokens. A combat's `turn` is left as it is; readers clamp it.
func removeCombatantsOf(tx *Tx, r ref) error {
	var match func(c Document) bool
	switch r.typ() {
	case typeActor:
		match = func(c Document) bool { return c["actorId"] == r.id() }
	case typeToken:
		match = func(c Document) bool { return c["tokenId"] == r.id() && c["sceneId"] == r.segs[0].id }
	case typeScene:
		match = func(c Document) bool { return c["sceneId"] == r.id() }
	default:
		return nil
	}
	var uuids []string
	tx.View().each(typeCombat, func(combat Document) bool {
		for _, d := range docsOf(combat, combatCombatants.key) {
			if c := d.(map[string]any); match(c) {
				uuids = append(uuids, typeCombat.name+"."+str(combat["_id"])+"."+typeCombatant.name+"."+str(c["_id"]))
			}
		}
		return true
	})
	slices.Sort(uuids)
	for _, uuid := range uuids {
		if err := tx.Delete(uuid); err != nil {
			return err
		}
	}
	return nil
}
