package world

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// seedWorld writes a new world's database at path from a seed, in one
// transaction: the settings and every document, or nothing.
func seedWorld(ctx context.Context, path, clientID string, seed Seed, opts Options) error {
	perms := seed.Permissions
	if perms == nil {
		perms = map[string]Role{}
	}
	for p, role := range perms {
		if role < RoleNone || role > RoleGamemaster {
			return Errorf(ErrInvalid, "Seed permission %s: role %d is not a role from %d to %d", p, role, RoleNone, RoleGamemaster)
		}
	}
	permsJSON, err := json.Marshal(perms)
	if err != nil {
		return Errorf(ErrInvalid, "Seed permissions: %v", err)
	}
	st, err := openStore(path, true)
	if err != nil {
		return Wrapf(ErrUnavailable, err, "Could not create the database of world %s", clientID)
	}
	// The seed is not a change anyone listens to: no OnCommit here.
	e := newEngine(st, Info{ClientID: clientID, Title: seed.Title, System: seed.System}, perms,
		map[*docType]map[string]Document{}, Options{Clock: opts.Clock, NewID: opts.NewID})
	defer e.Close() // stops its committer and closes the store
	meta := map[string]string{
		metaClientID:    clientID,
		metaTitle:       seed.Title,
		metaSystem:      seed.System,
		metaPermissions: string(permsJSON),
	}
	if len(seed.Settings) > 0 {
		raw, err := json.Marshal(seed.Settings)
		if err != nil {
			return Errorf(ErrInvalid, "Seed settings: %v", err)
		}
		meta[metaSettings] = string(raw)
	}
	return e.mutate(ctx, meta, func(tx *Tx) error {
		collections := []struct {
			field string
			typ   *docType
			docs  []Document
		}{
			{"users", typeUser, seed.Users},
			{"folders", typeFolder, seed.Folders},
			{"actors", typeActor, seed.Actors},
			{"items", typeItem, seed.Items},
			{"scenes", typeScene, seed.Scenes},
			{"journal", typeJournalEntry, seed.JournalEntries},
			{"macros", typeMacro, seed.Macros},
			{"combats", typeCombat, seed.Combats},
		}
		for _, c := range collections {
			for i, doc := range c.docs {
				if err := seedDocument(tx, c.typ, doc); err != nil {
					return seedError(fmt.Sprintf("%s[%d]", c.field, i), err)
				}
			}
		}
		for _, c := range collections {
			for i, doc := range c.docs {
				if err := checkSeedFolder(tx.View(), c.typ, doc); err != nil {
					return seedError(fmt.Sprintf("%s[%d]", c.field, i), err)
				}
			}
		}
		return nil
	})
}

// seedDocument stores one top-level document of a seed under its own id.
func seedDocument(tx *Tx, t *docType, doc Document) error {
	id, _ := doc["_id"].(string)
	if !validID(id) {
		return Errorf(ErrInvalid, "'_id' must be %d letters and digits", idLength)
	}
	if tx.View().top(docKey{t, id}) != nil {
		return Errorf(ErrInvalid, "duplicate _id %s", id)
	}
	return tx.Put(t.name+"."+id, doc)
}

// checkSeedFolder checks that a seeded document's folder exists and holds
// its type.
func checkSeedFolder(v *View, t *docType, doc Document) error {
	folder := str(doc["folder"])
	if folder == "" || (t != typeFolder && !t.foldered) {
		return nil
	}
	holds := t.name
	if t == typeFolder {
		holds = str(doc["type"])
	}
	_, err := folderOf(v, folder, holds)
	return err
}

// seedError says which seed document an error is about, keeping its kind.
func seedError(where string, err error) error {
	var we *Error
	if errors.As(err, &we) {
		return Errorf(we.Kind, "Seed %s: %s", where, we.Msg)
	}
	return Errorf(ErrInvalid, "Seed %s: %v", where, err)
}
