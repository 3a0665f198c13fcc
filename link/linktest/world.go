package linktest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"strings"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/world"
)

// WorldHandler answers the module's request types from a world (in tests,
// an embedded one), in the module's reply shapes (reference §3 to §6) and
// with the world's error texts, which follow the module's (§2.4): a
// tabletop the relay cannot tell from a real one, short of speed. The
// operations the world does not offer get no reply, as the module sends
// none for a type it has no handler for. Players returns the world's users
// as a `player-list`.
func WorldHandler(w world.World) Handler {
	return func(ctx context.Context, req Request) (any, bool) {
		var p params
		if err := json.Unmarshal(req.Message, &p); err != nil {
			return failure(err), true
		}
		p.raw = req.Message
		var user *world.User
		if p.UserID != "" {
			u, err := w.ResolveUser(ctx, p.UserID)
			if err != nil {
				return map[string]any{"error": "User not found: " + p.UserID, "data": nil}, true
			}
			user = u
		}
		op, ok := operations[req.Type]
		if !ok {
			return nil, false
		}
		reply, err := op(ctx, w, user, p)
		if errors.Is(err, world.ErrUnimplemented) {
			return nil, false
		}
		if err != nil {
			return failure(err), true
		}
		return reply, true
	}
}

// Players returns the world's users as the module's player list.
func Players(ctx context.Context, w world.World) ([]link.Player, error) {
	users, err := w.Users(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]link.Player, len(users))
	for i, u := range users {
		out[i] = link.Player{ID: u.ID, Name: u.Name, Role: u.Role, Active: u.IsGM()}
	}
	return out, nil
}

// params are the request fields the operations read.
type params struct {
	UserID         string         `json:"userId"`
	UUID           string         `json:"uuid"`
	Data           map[string]any `json:"data"`
	EntityType     string         `json:"entityType"`
	Folder         string         `json:"folder"`
	KeepID         bool           `json:"keepId"`
	Attribute      string         `json:"attribute"`
	Amount         float64        `json:"amount"`
	FromUUID       string         `json:"fromUuid"`
	ToUUID         string         `json:"toUuid"`
	ItemUUID       string         `json:"itemUuid"`
	ItemName       string         `json:"itemName"`
	ActorUUID      string         `json:"actorUuid"`
	Quantity       float64        `json:"quantity"`
	Query          string         `json:"query"`
	Filter         string         `json:"filter"`
	Limit          int            `json:"limit"`
	Path           string         `json:"path"`
	Recursive      bool           `json:"recursive"`
	RecursiveDepth int            `json:"recursiveDepth"`
	IncludeData    bool           `json:"includeEntityData"`
	Types          []string       `json:"types"`
	Name           string         `json:"name"`
	FolderType     string         `json:"folderType"`
	ParentFolderID string         `json:"parentFolderId"`
	FolderID       string         `json:"folderId"`
	DeleteAll      bool           `json:"deleteAll"`
	UUIDs          []string       `json:"uuids"`
	All            bool           `json:"all"`
	Overwrite      bool           `json:"overwrite"`
	TokenUUIDs     []string       `json:"tokenUuids"`
	WithSelected   bool           `json:"startWithSelected"`
	WithPlayers    bool           `json:"startWithPlayers"`
	RollNPC        bool           `json:"rollNPC"`
	RollAll        bool           `json:"rollAll"`
	EncounterID    string         `json:"encounterId"`
	Selected       bool           `json:"selected"`
	RollInitiative bool           `json:"rollInitiative"`
	Filename       string         `json:"filename"`
	FileData       string         `json:"fileData"`
	Script         string         `json:"script"`
	// raw is the whole request, for the operations that read fields of
	// their own (the fifth-edition ones, see dnd5e.go).
	raw json.RawMessage
}

// failure is the module's error reply.
func failure(err error) map[string]any {
	return map[string]any{"success": false, "error": err.Error(), "data": nil}
}

// operation answers one request type.
type operation func(ctx context.Context, w world.World, user *world.User, p params) (any, error)

// capability runs fn with w as the capability C.
func capability[C any](fn func(ctx context.Context, c C, user *world.User, p params) (any, error)) operation {
	return func(ctx context.Context, w world.World, user *world.User, p params) (any, error) {
		c, err := world.Capability[C](w, "")
		if err != nil {
			return nil, err
		}
		return fn(ctx, c, user, p)
	}
}

// attribute answers `increase` (sign 1) and `decrease` (sign -1).
func attribute(sign float64) operation {
	return capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		ch, err := d.ModifyAttribute(ctx, user, p.UUID, p.Attribute, sign*p.Amount)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "results": []any{map[string]any{"uuid": ch.UUID, "attribute": ch.Attribute, "oldValue": ch.OldValue, "newValue": ch.NewValue}}}, nil
	})
}

// navigate answers a turn or round move.
func navigate(action world.EncounterAction) operation {
	return capability(func(ctx context.Context, e world.Encounters, user *world.User, p params) (any, error) {
		pos, err := e.NavigateEncounter(ctx, user, p.EncounterID, action)
		if err != nil {
			return nil, err
		}
		// The module names the encounter without its combatants
		// (reference §5).
		enc := pos.Encounter
		return map[string]any{"encounterId": pos.EncounterID, "action": string(pos.Action), "currentTurn": pos.Turn, "currentRound": pos.Round,
			"actorTurn": orNull(pos.ActorUUID), "tokenTurn": orNull(pos.TokenUUID),
			"encounter": map[string]any{"id": enc.ID, "name": enc.Name, "round": enc.Round, "turn": enc.Turn}}, nil
	})
}

// encounter is an encounter in the module's shape.
func encounter(e world.Encounter) map[string]any {
	cs := make([]any, len(e.Combatants))
	for i, c := range e.Combatants {
		var ini any
		if c.Initiative != nil {
			ini = *c.Initiative
		}
		cs[i] = map[string]any{"id": c.ID, "name": c.Name, "tokenUuid": orNull(c.TokenUUID), "actorUuid": orNull(c.ActorUUID),
			"img": orNull(c.Img), "initiative": ini, "hidden": c.Hidden, "defeated": c.Defeated}
	}
	return map[string]any{"id": e.ID, "name": e.Name, "round": e.Round, "turn": e.Turn, "current": e.Current, "combatants": cs}
}

// orNull is s, or JSON null when s is empty.
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// members answers an add or a remove.
func members(remove bool) operation {
	return capability(func(ctx context.Context, e world.Encounters, user *world.User, p params) (any, error) {
		mp := world.EncounterMembersParams{EncounterID: p.EncounterID, UUIDs: p.UUIDs, Selected: p.Selected, RollInitiative: p.RollInitiative}
		do, field := e.AddToEncounter, "added"
		if remove {
			do, field = e.RemoveFromEncounter, "removed"
		}
		res, err := do(ctx, user, mp)
		if err != nil {
			return nil, err
		}
		failed := make([]any, len(res.Failed))
		for i, f := range res.Failed {
			failed[i] = map[string]any{"uuid": f.UUID, "reason": f.Reason}
		}
		return map[string]any{"encounterId": res.EncounterID, field: res.Done, "failed": failed}, nil
	})
}

// operations are the request types the simulator answers.
var operations = map[string]operation{
	"entity": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		raw, err := d.GetJSON(ctx, user, p.UUID)
		if err != nil {
			return nil, err
		}
		return map[string]any{"uuid": p.UUID, "data": moduleCombatJSON(p.UUID, sourceData(raw))}, nil
	}),
	"update": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		if missing(ctx, d, p.UUID) {
			// The module updates a null document: a JavaScript error, or
			// for a user the write check on nothing (reference §4.3).
			if user != nil {
				return nil, fmt.Errorf("User '%s' does not have permission to update 'unknown'", user.Name)
			}
			return nil, errors.New("Cannot read properties of null (reading 'update')")
		}
		doc, err := d.Update(ctx, user, p.UUID, p.Data)
		if err != nil {
			return nil, err
		}
		delete(doc, "uuid")
		return map[string]any{"uuid": p.UUID, "entity": []any{doc}}, nil
	}),
	"create": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		doc, err := d.Create(ctx, user, world.CreateParams{Type: p.EntityType, Data: p.Data, Folder: p.Folder, KeepID: p.KeepID})
		if err != nil {
			return nil, err
		}
		id, _ := doc["_id"].(string)
		delete(doc, "uuid")
		return map[string]any{"uuid": p.EntityType + "." + id, "entity": doc}, nil
	}),
	"delete": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		if missing(ctx, d, p.UUID) {
			// The module deletes nothing and says it did; for a user the
			// write check on nothing fails (reference §4.3).
			if user != nil {
				return nil, fmt.Errorf("User '%s' does not have permission to delete 'unknown'", user.Name)
			}
			return map[string]any{"uuid": p.UUID, "success": true}, nil
		}
		if err := d.Delete(ctx, user, p.UUID); err != nil {
			return nil, err
		}
		return map[string]any{"uuid": p.UUID, "success": true}, nil
	}),
	"increase": attribute(1),
	"decrease": attribute(-1),
	"give": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		g, err := d.Give(ctx, user, world.GiveParams{FromUUID: p.FromUUID, ToUUID: p.ToUUID, ItemUUID: p.ItemUUID, ItemName: p.ItemName, Quantity: p.Quantity})
		if err != nil {
			return nil, err
		}
		return map[string]any{"fromUuid": g.FromUUID, "selected": false, "toUuid": g.ToUUID, "quantity": g.Quantity, "itemUuid": g.ItemUUID,
			"newItemId": path.Ext(g.NewItemUUID)[1:], "success": true}, nil
	}),
	"remove": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		r, err := d.Remove(ctx, user, world.RemoveParams{ActorUUID: p.ActorUUID, ItemUUID: p.ItemUUID, ItemName: p.ItemName, Quantity: p.Quantity})
		if err != nil {
			return nil, err
		}
		return map[string]any{"actorUuid": r.ActorUUID, "itemUuid": r.ItemUUID, "quantity": r.Quantity, "success": true}, nil
	}),
	"kill": capability(func(ctx context.Context, d world.Documents, user *world.User, p params) (any, error) {
		k, err := d.Kill(ctx, user, p.UUID)
		if err != nil {
			return nil, err
		}
		return map[string]any{"results": []any{map[string]any{"uuid": k.UUID, "success": true, "message": k.Message}}}, nil
	}),
	"search": capability(func(ctx context.Context, s world.DocumentSearch, user *world.User, p params) (any, error) {
		res, err := s.Search(ctx, user, world.SearchParams{Query: p.Query, Filter: p.Filter, Limit: p.Limit})
		if err != nil {
			return nil, err
		}
		return map[string]any{"query": p.Query, "filter": p.Filter, "results": res}, nil
	}),
	"structure": capability(func(ctx context.Context, f world.Folders, user *world.User, p params) (any, error) {
		// The module reads `types`, else `type`, which in its flat request
		// is the request's own type: without `types` it lists the types
		// named "structure", which is nothing (reference §9).
		if len(p.Types) == 0 {
			return map[string]any{"data": map[string]any{"folders": map[string]any{}}}, nil
		}
		data, err := f.Structure(ctx, user, world.StructureParams{Types: p.Types, Path: p.Path, Recursive: p.Recursive, Depth: p.RecursiveDepth, IncludeData: p.IncludeData})
		if err != nil {
			return nil, err
		}
		return map[string]any{"data": moduleEntries(world.ModuleStructure(data, p.Path != ""), p.IncludeData)}, nil
	}),
	"create-folder": capability(func(ctx context.Context, f world.Folders, user *world.User, p params) (any, error) {
		data, err := f.CreateFolder(ctx, user, world.FolderParams{Name: p.Name, Type: p.FolderType, ParentID: p.ParentFolderID, ID: p.FolderID})
		if err != nil {
			return nil, err
		}
		return map[string]any{"data": data}, nil
	}),
	"delete-folder": capability(func(ctx context.Context, f world.Folders, user *world.User, p params) (any, error) {
		d, err := f.DeleteFolder(ctx, user, p.FolderID, p.DeleteAll)
		if err != nil {
			return nil, err
		}
		return map[string]any{"data": map[string]any{"deleted": true, "folderId": d.FolderID, "entitiesDeleted": d.EntitiesDeleted, "foldersDeleted": d.FoldersDeleted}}, nil
	}),
	"select": capability(func(ctx context.Context, s world.Selection, user *world.User, p params) (any, error) {
		// The module takes any `data` object as a filter, and an empty one
		// matches every token of the scene (reference §4.8).
		all := p.All || (p.Data != nil && len(p.Data) == 0)
		sel, err := s.Select(ctx, user, world.SelectParams{UUIDs: p.UUIDs, Name: p.Name, All: all, Overwrite: p.Overwrite, Match: p.Data})
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "count": len(sel), "selected": sel}, nil
	}),
	"selected": capability(func(ctx context.Context, s world.Selection, user *world.User, _ params) (any, error) {
		toks, err := s.Selected(ctx, user)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(toks))
		for i, t := range toks {
			out[i] = map[string]any{"tokenUuid": t.TokenUUID, "actorUuid": orNull(t.ActorUUID)}
		}
		return map[string]any{"success": true, "selected": out}, nil
	}),
	"encounters": capability(func(ctx context.Context, e world.Encounters, user *world.User, _ params) (any, error) {
		list, err := e.ListEncounters(ctx, user)
		if err != nil {
			return nil, err
		}
		out := make([]any, len(list))
		for i, enc := range list {
			out[i] = encounter(enc)
		}
		return map[string]any{"encounters": out}, nil
	}),
	"start-encounter": capability(func(ctx context.Context, e world.Encounters, user *world.User, p params) (any, error) {
		enc, err := e.StartEncounter(ctx, user, world.StartEncounterParams{Name: p.Name, TokenUUIDs: p.TokenUUIDs, WithSelected: p.WithSelected,
			WithPlayers: p.WithPlayers, RollNPC: p.RollNPC, RollAll: p.RollAll})
		if err != nil {
			return nil, err
		}
		return map[string]any{"encounterId": enc.ID, "encounter": encounter(enc)}, nil
	}),
	"next-turn":  navigate(world.NextTurn),
	"next-round": navigate(world.NextRound),
	"last-turn":  navigate(world.PreviousTurn),
	"last-round": navigate(world.PreviousRound),
	"end-encounter": capability(func(ctx context.Context, e world.Encounters, user *world.User, p params) (any, error) {
		id, err := e.EndEncounter(ctx, user, p.EncounterID)
		if err != nil {
			return nil, err
		}
		return map[string]any{"encounterId": id, "message": "Encounter successfully ended"}, nil
	}),
	"add-to-encounter":      members(false),
	"remove-from-encounter": members(true),
	"file-system": capability(func(ctx context.Context, f world.Files, user *world.User, p params) (any, error) {
		dir, entries, err := f.ListFiles(ctx, user, world.ListFilesParams{Path: p.Path, Recursive: p.Recursive, Depth: 3})
		if err != nil {
			return nil, err
		}
		out := make([]any, len(entries))
		for i, e := range entries {
			out[i] = map[string]any{"name": e.Name, "path": e.Path, "type": e.Type}
		}
		return map[string]any{"success": true, "path": dir, "source": "data", "results": out, "recursive": p.Recursive}, nil
	}),
	"download-file": capability(func(ctx context.Context, f world.Files, user *world.User, p params) (any, error) {
		if strings.HasPrefix(p.Path, "http") {
			// The module fetches such a path from the game master's
			// browser, wherever it points (reference §6).
			return fetch(ctx, p.Path)
		}
		fc, err := f.OpenFile(ctx, user, p.Path)
		if err != nil {
			return nil, err
		}
		defer fc.Body.Close()
		data, err := io.ReadAll(fc.Body)
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "path": fc.Path, "filename": fc.Name, "mimeType": fc.MIMEType,
			"fileData": "data:" + fc.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(data)}, nil
	}),
	"upload-file": capability(func(ctx context.Context, f world.Files, user *world.User, p params) (any, error) {
		comma := strings.IndexByte(p.FileData, ',')
		if !strings.HasPrefix(p.FileData, "data:") || comma < 0 {
			return nil, errors.New("Invalid file data format: must be data URL with base64 content")
		}
		data, err := base64.StdEncoding.DecodeString(p.FileData[comma+1:])
		if err != nil {
			return nil, errors.New("Invalid base64 data: " + err.Error())
		}
		written, err := f.WriteFile(ctx, user, world.WriteFileParams{Dir: p.Path, Name: p.Filename, Overwrite: p.Overwrite}, bytes.NewReader(data))
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "path": written.Path}, nil
	}),
	"execute-js": capability(func(ctx context.Context, s world.Scripts, user *world.User, p params) (any, error) {
		res, err := s.ExecuteJS(ctx, user, p.Script, world.ScriptOptions{})
		if err != nil {
			return nil, err
		}
		return map[string]any{"success": true, "result": res.Value}, nil
	}),
}

// fetch answers a `download-file` of a URL as the module does: it fetches
// the address as given and answers its bytes as a data URL.
func fetch(ctx context.Context, url string) (any, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, errors.New("Failed to fetch")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, errors.New("Failed to fetch")
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return nil, fmt.Errorf("Failed to download file: %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, errors.New("Failed to fetch")
	}
	mimeType := resp.Header.Get("Content-Type")
	if mimeType == "" {
		mimeType = "application/octet-stream"
	}
	name := path.Base(req.URL.Path)
	if name == "/" || name == "." {
		name = "file"
	}
	return map[string]any{"success": true, "path": url, "filename": name, "mimeType": mimeType,
		"fileData": "data:" + mimeType + ";base64," + base64.StdEncoding.EncodeToString(data)}, nil
}

// missing reports whether the world lacks the document uuid.
func missing(ctx context.Context, d world.Documents, uuid string) bool {
	_, err := d.GetJSON(ctx, nil, uuid)
	return errors.Is(err, world.ErrNotFound)
}

// sourceData is a document as the module sends it: its source data, which
// has no uuid.
func sourceData(raw []byte) json.RawMessage {
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return raw
	}
	delete(doc, "uuid")
	out, err := json.Marshal(doc)
	if err != nil {
		return raw
	}
	return out
}

// moduleEntries gives the documents of a structure in the module's shape
// (reference §4.5): the full data without uuid (the module sends
// `toObject`) when includeData asks for it, else `{uuid, name, id, type}`
// (and the image for documents the user sees in part).
func moduleEntries(v any, includeData bool) any {
	switch v := v.(type) {
	case map[string]any:
		if _, isDoc := v["_id"]; isDoc && includeData {
			out := maps.Clone(v)
			delete(out, "uuid")
			return out
		}
		if _, isEntry := v["name"]; isEntry && v["uuid"] != nil && v["id"] != nil {
			entry := map[string]any{"uuid": v["uuid"], "name": v["name"], "id": v["id"], "type": v["type"]}
			if includeData {
				// With includeEntityData, an entry that is not the full
				// data is a document the user sees in part: its summary
				// has the image.
				entry["img"] = v["img"]
			}
			return entry
		}
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = moduleEntries(x, includeData)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = moduleEntries(x, includeData)
		}
		return out
	}
	return v
}
