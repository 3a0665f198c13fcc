package world

import (
	"context"
	"slices"
	"strings"
)

// Folders are top-level Folder documents: `name`, `type` (the document type
// they hold), `folder` (the parent folder's id or null), `sorting`, `sort`,
// `color`. A document sits in a folder through its own `folder` field.

// foldered returns the type named name when folders can hold it.
func foldered(name string) *docType {
	for _, t := range folderedTypes {
		if t.name == name {
			return t
		}
	}
	return nil
}

// folderedNames lists the types folders hold, for error messages.
func folderedNames() string {
	names := make([]string, len(folderedTypes))
	for i, t := range folderedTypes {
		names[i] = t.name
	}
	return strings.Join(names, ", ")
}

// errFolderNotFound is the answer for a folder id that names no folder, or
// none the user may see.
func errFolderNotFound(id string) error {
	return Errorf(ErrNotFound, "Folder not found with ID: %s", id)
}

// folderOf returns the folder with the given id, which must hold documents
// of type holds.
func folderOf(v *View, id, holds string) (Document, error) {
	doc := v.top(docKey{typeFolder, id})
	if doc == nil {
		return nil, errFolderNotFound(id)
	}
	if t := str(doc["type"]); t != holds {
		return nil, Errorf(ErrInvalid, "Folder %s holds %s documents, not %s", id, t, holds)
	}
	return doc, nil
}

// folderContents returns the uuids of the documents directly in a folder
// and the ids of its direct sub-folders, both sorted.
func folderContents(v *View, id string) (entities, children []string) {
	for _, t := range folderedTypes {
		v.each(t, func(doc Document) bool {
			if doc["folder"] == id {
				entities = append(entities, t.name+"."+str(doc["_id"]))
			}
			return true
		})
	}
	v.each(typeFolder, func(doc Document) bool {
		if doc["folder"] == id {
			children = append(children, str(doc["_id"]))
		}
		return true
	})
	slices.Sort(entities)
	slices.Sort(children)
	return entities, children
}

// folderSummary is what the folder operations return about a folder.
func folderSummary(doc Document) Document {
	id := str(doc["_id"])
	parent := doc["folder"]
	if parent == "" {
		parent = nil
	}
	return Document{"id": id, "uuid": typeFolder.name + "." + id, "name": doc["name"], "type": doc["type"], "parentFolder": parent}
}

// CreateFolder creates a folder (GM only) and returns its summary: `id`,
// `uuid`, `name`, `type` and `parentFolder` (an id or null). The parent
// folder, when given, must exist and hold the same type. When p.ID names a
// folder that already exists, that folder is returned unchanged.
func (e *Engine) CreateFolder(ctx context.Context, user *User, p FolderParams) (Document, error) {
	if err := requireGM(user, "create folders"); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, Errorf(ErrInvalid, "'name' is required")
	}
	if p.Type == "" {
		return nil, Errorf(ErrInvalid, "'folderType' is required")
	}
	if foldered(p.Type) == nil {
		return nil, Errorf(ErrInvalid, "'folderType' must be one of %s", folderedNames())
	}
	if p.ID != "" && !validID(p.ID) {
		return nil, Errorf(ErrInvalid, "'folderId' must be %d letters and digits", idLength)
	}
	var out Document
	err := e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		if p.ID != "" {
			if doc := v.top(docKey{typeFolder, p.ID}); doc != nil {
				out = folderSummary(doc)
				return nil
			}
		}
		var parent any
		if p.ParentID != "" {
			if v.top(docKey{typeFolder, p.ParentID}) == nil {
				return Errorf(ErrNotFound, "Parent folder not found with ID: %s", p.ParentID)
			}
			if _, err := folderOf(v, p.ParentID, p.Type); err != nil {
				return err
			}
			parent = p.ParentID
		}
		data := Document{
			"name": p.Name, "type": p.Type, "folder": parent,
			"sorting": "a", "sort": 0.0, "color": nil, "description": "", "flags": Document{},
		}
		if p.ID != "" {
			data["_id"] = p.ID
		}
		uuid, err := tx.Create(typeFolder.name, "", data)
		if err != nil {
			return err
		}
		doc, err := tx.View().Get(uuid)
		if err != nil {
			return err
		}
		out = folderSummary(doc)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteFolder deletes a folder (GM only). A folder that holds documents or
// sub-folders is deleted only with deleteAll, which deletes its whole
// subtree (sub-folders depth first, with their documents) in the same
// transaction. FoldersDeleted counts the sub-folders deleted along with the
// folder; EntitiesDeleted the documents.
func (e *Engine) DeleteFolder(ctx context.Context, user *User, folderID string, deleteAll bool) (FolderDeletion, error) {
	if err := requireGM(user, "delete folders"); err != nil {
		return FolderDeletion{}, err
	}
	if folderID == "" {
		return FolderDeletion{}, Errorf(ErrInvalid, "'folderId' is required")
	}
	res := FolderDeletion{FolderID: folderID}
	err := e.Mutate(ctx, func(tx *Tx) error {
		v := tx.View()
		if v.top(docKey{typeFolder, folderID}) == nil {
			return Errorf(ErrNotFound, "Folder not found with ID: %s", folderID)
		}
		if !deleteAll {
			entities, children := folderContents(v, folderID)
			if len(entities) > 0 {
				return Errorf(ErrFailedPrecondition, "Folder contains %d entities. Use deleteAll=true to delete them or move them first.", len(entities))
			}
			if len(children) > 0 {
				return Errorf(ErrFailedPrecondition, "Folder contains %d child folders. Use deleteAll=true to delete them or move them first.", len(children))
			}
		}
		return deleteFolderTree(tx, folderID, &res, map[string]bool{})
	})
	if err != nil {
		return FolderDeletion{}, err
	}
	return res, nil
}

// deleteFolderTree deletes a folder, its sub-folders and every document in
// them, counting what it deletes below the first folder. seen guards
// against parent cycles in damaged data.
func deleteFolderTree(tx *Tx, id string, res *FolderDeletion, seen map[string]bool) error {
	if seen[id] {
		return nil
	}
	seen[id] = true
	entities, children := folderContents(tx.View(), id)
	for _, child := range children {
		if err := deleteFolderTree(tx, child, res, seen); err != nil {
			return err
		}
		res.FoldersDeleted++
	}
	for _, uuid := range entities {
		if err := tx.Delete(uuid); err != nil {
			return err
		}
		res.EntitiesDeleted++
	}
	return tx.Delete(typeFolder.name + "." + id)
}

// moveFolderContents moves the documents and sub-folders of a folder into
// another folder (nil: to the root).
func moveFolderContents(tx *Tx, id string, to any) error {
	entities, children := folderContents(tx.View(), id)
	for _, child := range children {
		entities = append(entities, typeFolder.name+"."+child)
	}
	for _, uuid := range entities {
		if _, err := tx.update(uuid, Document{"folder": to}); err != nil {
			return err
		}
	}
	return nil
}
