package link

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// Linked is a linked world: a tabletop connected through the hub, seen
// through the world capability interfaces. Each operation goes to the
// module as its request type (reference §1.11) with its parameters
// (§3 to §6), the resolved user's id and, for keys with scopes, `_scopes`;
// the module's moduleReply is translated into the world's result types, and its
// error texts (§2.4) into world errors, so that the relay's services
// answer exactly as they do for an embedded world.
//
// The world's users are the module's last `player-list`. A Linked holds no
// connection of its own: every call looks up the world's live connection
// in the hub, so a Linked stays valid across reconnections, and a call
// while the world is not connected fails at once with ErrNotConnected.
type Linked struct {
	hub      *Hub
	clientID string
	// fallback describes the world while it is not connected (its title
	// and system from the pairing record).
	fallback world.Info
	// events streams the world's events; without it the world offers
	// none.
	events *Events
}

// The capabilities a linked world offers, checked by the compiler. The
// fifth-edition operations are offered only by a world of the dnd5e system
// (see [Linked.Resolved]); elsewhere the services answer them with
// ErrUnimplemented (501) naming the operation.
var (
	_ world.World          = (*Linked)(nil)
	_ world.Documents      = (*Linked)(nil)
	_ world.DocumentSearch = (*Linked)(nil)
	_ world.Folders        = (*Linked)(nil)
	_ world.Selection      = (*Linked)(nil)
	_ world.Encounters     = (*Linked)(nil)
	_ world.Files          = (*Linked)(nil)
	_ world.Scripts        = (*Linked)(nil)
	_ world.Events         = (*Linked)(nil)
)

// NewLinked returns the linked world clientID of hub. info describes the
// world while it is not connected (the live connection's description wins
// while there is one); its ClientID is set to clientID.
func NewLinked(hub *Hub, clientID string, info world.Info) *Linked {
	info.ClientID = clientID
	return &Linked{hub: hub, clientID: clientID, fallback: info}
}

// WithEvents makes the world offer event streams from events, and returns
// it.
func (w *Linked) WithEvents(events *Events) *Linked {
	w.events = events
	return w
}

// Info describes the world: its title and system as the module reported
// them when it connected.
func (w *Linked) Info() world.Info {
	info := w.fallback
	if ci, ok := w.hub.Info(w.clientID); ok {
		if ci.WorldTitle != "" {
			info.Title = ci.WorldTitle
		}
		if ci.SystemID != "" {
			info.System = ci.SystemID
		}
	}
	return info
}

// players returns the world's users from the live connection's
// `player-list`; a world that is not connected is ErrNotConnected.
func (w *Linked) players(requestType string) ([]Player, error) {
	ci, ok := w.hub.Info(w.clientID)
	if !ok {
		return nil, newCallError(ErrNotConnected, w.clientID, requestType, "")
	}
	return ci.Players, nil
}

// ResolveUser finds a player by id, then by case-insensitive name, as the
// module does (reference §2.1). An unknown user is ErrInvalid
// `User not found: <idOrName>`.
func (w *Linked) ResolveUser(_ context.Context, idOrName string) (*world.User, error) {
	players, err := w.players("players")
	if err != nil {
		return nil, err
	}
	for _, p := range players {
		if p.ID == idOrName {
			u := p.User()
			return &u, nil
		}
	}
	for _, p := range players {
		if strings.EqualFold(p.Name, idOrName) {
			u := p.User()
			return &u, nil
		}
	}
	return nil, world.Errorf(world.ErrInvalid, "User not found: %s", idOrName)
}

// Users lists the world's players, sorted by name.
func (w *Linked) Users(context.Context) ([]world.User, error) {
	players, err := w.players("players")
	if err != nil {
		return nil, err
	}
	out := make([]world.User, len(players))
	for i, p := range players {
		out[i] = p.User()
	}
	sortUsers(out)
	return out, nil
}

// Can reports whether the user holds a world permission. The tabletop's
// defaults decide, since the module does not report its world's
// permission settings: the file permissions need the TRUSTED role, every
// other permission a GM. The module checks its own settings again on each
// file request, so a world that grants less still refuses with its text.
func (w *Linked) Can(user *world.User, permission string) bool {
	if user == nil {
		return true
	}
	switch permission {
	case world.PermissionFilesBrowse, world.PermissionFilesUpload:
		return user.Role >= world.RoleTrusted
	}
	return user.IsGM()
}

// sortUsers sorts users by name, then id, as the embedded engine lists
// them.
func sortUsers(us []world.User) {
	slices.SortFunc(us, func(a, b world.User) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.ID, b.ID))
	})
}

// request sends one request to the module and returns its moduleReply's fields.
// params are the request's own parameters; the user's id (when user is
// not nil) and `_scopes` (when the caller's key has scopes) are added. A
// moduleReply with an `error` is returned as the world error its text
// stands for (see [moduleError]).
func (w *Linked) request(ctx context.Context, user *world.User, requestType string, params map[string]any) (moduleReply, error) {
	raw, fields, release, err := w.hub.callHeld(ctx, w.clientID, requestType, w.prepare(ctx, user, params))
	// The reply's bytes count against the world's reply budget until it
	// is decoded.
	defer release()
	if err != nil {
		return nil, err
	}
	if fields != nil {
		return w.checkFields(fields)
	}
	return w.check(requestType, raw)
}

// prepare adds to a request's parameters what every request carries: the
// user's id and, for keys with scopes, `_scopes`. Nothing else is added:
// the module reads some fields whatever the request (`select` takes any
// `data` object, even an empty one, as a filter that matches every
// token), so a request carries only the fields its operation gives.
func (w *Linked) prepare(ctx context.Context, user *world.User, params map[string]any) map[string]any {
	if params == nil {
		params = map[string]any{}
	}
	if user != nil {
		params["userId"] = user.ID
	}
	if c := world.CallerFrom(ctx); c != nil && len(c.Scopes) > 0 {
		params["_scopes"] = c.Scopes
	}
	return params
}

// check reads a module's reply: its fields, or the world error its
// `error` stands for.
func (w *Linked) check(requestType string, raw json.RawMessage) (moduleReply, error) {
	r, ok := readReply(raw)
	if !ok {
		return nil, badReply(w.clientID, requestType, "not a JSON object")
	}
	return w.checkFields(r)
}

// checkFields is check for a reply already split into its fields.
func (w *Linked) checkFields(r moduleReply) (moduleReply, error) {
	if msg, failed := r.errorText(); failed {
		return nil, moduleError(msg)
	}
	return r, nil
}

// moduleReply is a module's moduleReply, field by field.
type moduleReply map[string]json.RawMessage

// readReply checks that a reply is a JSON object and splits it into its
// top-level fields, each value the slice of raw that holds it, in one pass
// that does not decode the values: a document of many kilobytes is looked
// at once, never decoded or copied. The values stay valid JSON: a document
// is passed on as it is. The connection's reader splits most replies so
// itself (Conn.dispatch); this is for those read in pieces.
func readReply(raw json.RawMessage) (moduleReply, bool) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	r := moduleReply{}
	_, ok := scanJSON(raw, func(m member) bool {
		if m.key != "" { // no field the relay reads has an empty or escaped name
			r[m.key] = m.value
		}
		return true
	})
	return r, ok
}

// text returns the field's value when it is a JSON string.
func (r moduleReply) text(field string) (string, bool) {
	raw := r[field]
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1]), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// errorText returns the moduleReply's `error` when it has one that is not null
// or empty: the module signals every failure so (reference §1.7).
func (r moduleReply) errorText() (string, bool) {
	raw, ok := r["error"]
	if !ok || string(raw) == "null" {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return strings.TrimSpace(string(raw)), true
	}
	if s == "" {
		return "", false
	}
	return s, true
}

// decode decodes the moduleReply's field into v; a missing field leaves v as it
// is.
func (r moduleReply) decode(field string, v any) error {
	raw, ok := r[field]
	if !ok {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// badReply is the error for a moduleReply the relay cannot read: the module is
// not the one the relay speaks to, or it changed. Callers get 503, as for
// any world that cannot serve them.
func badReply(clientID, requestType, why string) error {
	return world.Errorf(world.ErrUnavailable, "world %s answered %s with a moduleReply the relay cannot read: %s", clientID, requestType, why)
}

// moduleError translates one of the module's error texts (reference §2.4
// and the per-operation texts of §3 to §6) into the world error of its
// kind, keeping the text for the caller:
//
//   - `User not found: <id>`, a missing or malformed parameter → ErrInvalid
//     (400);
//   - `… does not have permission …`, `… must be a GM to …`, `… does not
//     have '<PERM>' permission …`, an operation disabled in the module's
//     settings or a scope the module asks for → ErrPermission (403);
//   - `… not found …`, no active encounter, no matching tokens →
//     ErrNotFound (404);
//   - `… already exists …` → ErrConflict (409);
//   - no active scene, not concentrating → ErrFailedPrecondition.
//
// Any other text is ErrInvalid, as the relay the module was written for
// answers every error with 400.
func moduleError(msg string) error {
	lower := strings.ToLower(msg)
	kind := world.ErrInvalid
	switch {
	case strings.HasPrefix(msg, "User not found: "):
		kind = world.ErrInvalid
	case strings.Contains(lower, "does not have permission"),
		strings.Contains(lower, "must be a gm"),
		strings.Contains(lower, "' permission required to"),
		strings.Contains(lower, "disabled in rest api module settings"),
		strings.Contains(lower, "scope is required"),
		strings.Contains(lower, "cannot be executed by the current user"),
		strings.Contains(lower, "cannot modify rest api module settings"):
		kind = world.ErrPermission
	case strings.Contains(lower, "not found"), strings.HasPrefix(lower, "no active encounter"),
		strings.HasPrefix(lower, "no matching entities"):
		kind = world.ErrNotFound
	case strings.Contains(lower, "already exists"):
		kind = world.ErrConflict
	case strings.HasPrefix(lower, "no active "), strings.Contains(lower, "not concentrating"),
		strings.Contains(lower, "no combat"), strings.Contains(lower, "insufficient"):
		kind = world.ErrFailedPrecondition
	case slices.ContainsFunc(rulesPreconditions, func(p string) bool { return strings.Contains(lower, p) }):
		kind = world.ErrFailedPrecondition
	}
	return &world.Error{Kind: kind, Msg: msg}
}

// rulesPreconditions are parts of the fifth-edition operations' texts
// for a state of the actor that does not allow the operation (the
// embedded world's, which the simulator sends, and the module's own):
// they are ErrFailedPrecondition, as in an embedded world.
var rulesPreconditions = []string{
	"is dead", "makes no death saves", "no token selected", "cannot remove", "does not have experience points",
	"has no charges", "cannot be equipped", "does not require attunement", "already attuned", "can prepare at most",
	"cantrips are always prepared", "is always prepared", "is not prepared", "no uses left", "spell slots with which",
	"has not enough", "consumes an item", "made no roll",
}

// param adds v to params under key unless v is the zero value.
func param[T comparable](params map[string]any, key string, v T) {
	var zero T
	if v != zero {
		params[key] = v
	}
}

// Documents.

// Get implements [world.Documents] with the module's `entity`.
func (w *Linked) Get(ctx context.Context, user *world.User, uuid string) (world.Document, error) {
	raw, err := w.GetJSON(ctx, user, uuid)
	if err != nil {
		return nil, err
	}
	var doc world.Document
	if err := json.Unmarshal(raw, &doc); err != nil || doc == nil {
		return nil, badReply(w.clientID, "entity", "data is not a document")
	}
	return doc, nil
}

// GetJSON implements [world.Documents]: the module's document as it sent
// it.
func (w *Linked) GetJSON(ctx context.Context, user *world.User, uuid string) ([]byte, error) {
	if uuid == "" {
		return nil, world.Errorf(world.ErrInvalid, "uuid is required")
	}
	r, err := w.request(ctx, user, "entity", map[string]any{"uuid": uuid})
	if err != nil {
		return nil, err
	}
	data := r["data"]
	if len(data) == 0 || data[0] != '{' {
		return nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
	}
	w.events.Observe(w.clientID, uuid, data)
	return withUUID(data, uuid), nil
}

// withUUID returns the document doc (a JSON object) with a top-level
// `uuid`: the module sends a document's source data, which has none, while
// the embedded world's documents carry theirs. A document that has one
// keeps it.
func withUUID(doc json.RawMessage, uuid string) json.RawMessage {
	// The document comes out of a reply the connection's reader checked,
	// so looking for its uuid needs no second check of the JSON.
	trimmed := bytes.TrimLeft(doc, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' || hasMember(doc, "uuid") {
		return doc
	}
	rest := trimmed[1:]
	out := make([]byte, 0, len(doc)+len(uuid)+16)
	out = append(out, `{"uuid":`...)
	quoted, _ := json.Marshal(uuid)
	out = append(out, quoted...)
	if r := bytes.TrimLeft(rest, " \t\r\n"); len(r) > 0 && r[0] != '}' {
		out = append(out, ',')
	}
	return append(out, rest...)
}

// setUUID gives doc the uuid the module leaves out of the documents it
// sends (see [withUUID]).
func setUUID(doc world.Document, uuid string) {
	if _, ok := doc["uuid"]; !ok && uuid != "" {
		doc["uuid"] = uuid
	}
}

// exists reports whether the world holds the document uuid, asking as the
// game master: the module acts on a missing document as on a null one
// (its update fails with a JavaScript error, its delete answers success),
// so the relay asks first where that matters.
func (w *Linked) exists(ctx context.Context, uuid string) (bool, error) {
	_, err := w.request(ctx, nil, "entity", map[string]any{"uuid": uuid})
	if errors.Is(err, world.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Update implements [world.Documents] with the module's `update`: the
// document as the module re-read it after the change.
func (w *Linked) Update(ctx context.Context, user *world.User, uuid string, data world.Document) (world.Document, error) {
	if uuid == "" {
		return nil, world.Errorf(world.ErrInvalid, "'uuid' is required")
	}
	r, err := w.request(ctx, user, "update", map[string]any{"uuid": uuid, "data": data})
	if err != nil {
		// The module fails on a missing document with a JavaScript
		// error (or, for a user, a permission text naming no document):
		// such a failure is the 404 it stands for.
		if errors.Is(err, world.ErrInvalid) || errors.Is(err, world.ErrPermission) {
			if found, ferr := w.exists(ctx, uuid); ferr == nil && !found {
				return nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
			}
		}
		return nil, err
	}
	var docs []world.Document
	if err := r.decode("entity", &docs); err != nil || len(docs) == 0 || docs[0] == nil {
		return nil, badReply(w.clientID, "update", "no entity")
	}
	w.events.observeDoc(w.clientID, uuid, docs[0])
	setUUID(docs[0], uuid)
	return docs[0], nil
}

// UpdateJSON implements [world.Documents].
func (w *Linked) UpdateJSON(ctx context.Context, user *world.User, uuid string, data world.Document) ([]byte, error) {
	doc, err := w.Update(ctx, user, uuid, data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(doc)
}

// Create implements [world.Documents] with the module's `create`. The
// module creates world documents only: an embedded document (ParentUUID)
// is ErrUnimplemented.
func (w *Linked) Create(ctx context.Context, user *world.User, p world.CreateParams) (world.Document, error) {
	if p.ParentUUID != "" {
		return nil, world.Errorf(world.ErrUnimplemented, "Linked '%s' does not offer create with parentUuid", w.clientID)
	}
	params := map[string]any{"entityType": p.Type, "data": p.Data}
	if p.Data == nil {
		params["data"] = map[string]any{}
	}
	param(params, "folder", p.Folder)
	param(params, "keepId", p.KeepID)
	r, err := w.request(ctx, user, "create", params)
	if err != nil {
		return nil, err
	}
	var doc world.Document
	if err := r.decode("entity", &doc); err != nil || doc == nil {
		return nil, badReply(w.clientID, "create", "no entity")
	}
	// The module names the new document at the top of its reply; its
	// document, the source data, has no uuid.
	var uuid string
	_ = r.decode("uuid", &uuid)
	if id, _ := doc["_id"].(string); id != "" {
		if uuid == "" {
			uuid = p.Type + "." + id
		}
		w.events.observeDoc(w.clientID, uuid, doc)
	}
	setUUID(doc, uuid)
	return doc, nil
}

// Delete implements [world.Documents] with the module's `delete`. The
// module answers success for a document that does not exist (it deletes
// nothing), so the relay checks that the document exists first.
func (w *Linked) Delete(ctx context.Context, user *world.User, uuid string) error {
	if uuid == "" {
		return world.Errorf(world.ErrInvalid, "'uuid' is required")
	}
	found, err := w.exists(ctx, uuid)
	if err != nil {
		return err
	}
	if !found {
		return world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
	}
	_, err = w.request(ctx, user, "delete", map[string]any{"uuid": uuid})
	return err
}

// Give implements [world.Documents] with the module's `give`.
func (w *Linked) Give(ctx context.Context, user *world.User, p world.GiveParams) (world.GiveResult, error) {
	params := map[string]any{"toUuid": p.ToUUID}
	param(params, "fromUuid", p.FromUUID)
	param(params, "itemUuid", p.ItemUUID)
	param(params, "itemName", p.ItemName)
	param(params, "quantity", p.Quantity)
	r, err := w.request(ctx, user, "give", params)
	if err != nil {
		return world.GiveResult{}, err
	}
	var out struct {
		FromUUID  string  `json:"fromUuid"`
		ToUUID    string  `json:"toUuid"`
		ItemUUID  string  `json:"itemUuid"`
		NewItemID string  `json:"newItemId"`
		Quantity  float64 `json:"quantity"`
	}
	if err := remarshal(r, &out); err != nil {
		return world.GiveResult{}, badReply(w.clientID, "give", err.Error())
	}
	res := world.GiveResult{FromUUID: out.FromUUID, ToUUID: out.ToUUID, ItemUUID: out.ItemUUID, Quantity: out.Quantity}
	if out.NewItemID != "" {
		res.NewItemUUID = out.ToUUID + ".Item." + out.NewItemID
	}
	return res, nil
}

// Remove implements [world.Documents] with the module's `remove`.
func (w *Linked) Remove(ctx context.Context, user *world.User, p world.RemoveParams) (world.RemoveResult, error) {
	params := map[string]any{"actorUuid": p.ActorUUID}
	param(params, "itemUuid", p.ItemUUID)
	param(params, "itemName", p.ItemName)
	param(params, "quantity", p.Quantity)
	r, err := w.request(ctx, user, "remove", params)
	if err != nil {
		return world.RemoveResult{}, err
	}
	var out struct {
		ActorUUID string  `json:"actorUuid"`
		ItemUUID  string  `json:"itemUuid"`
		Quantity  float64 `json:"quantity"`
	}
	if err := remarshal(r, &out); err != nil {
		return world.RemoveResult{}, badReply(w.clientID, "remove", err.Error())
	}
	return world.RemoveResult{ActorUUID: out.ActorUUID, ItemUUID: out.ItemUUID, Quantity: out.Quantity, Deleted: out.Quantity == 0}, nil
}

// ModifyAttribute implements [world.Documents] with the module's
// `increase` (delta ≥ 0) or `decrease` (delta < 0, by its size).
func (w *Linked) ModifyAttribute(ctx context.Context, user *world.User, uuid, attribute string, delta float64) (world.AttributeChange, error) {
	requestType, amount := "increase", delta
	if delta < 0 {
		requestType, amount = "decrease", -delta
	}
	r, err := w.request(ctx, user, requestType, map[string]any{"uuid": uuid, "attribute": attribute, "amount": amount})
	if err != nil {
		return world.AttributeChange{}, err
	}
	var results []struct {
		UUID      string  `json:"uuid"`
		Attribute string  `json:"attribute"`
		OldValue  float64 `json:"oldValue"`
		NewValue  float64 `json:"newValue"`
	}
	if err := r.decode("results", &results); err != nil || len(results) == 0 {
		return world.AttributeChange{}, badReply(w.clientID, requestType, "no results")
	}
	res := results[0]
	return world.AttributeChange{UUID: res.UUID, Attribute: res.Attribute, OldValue: res.OldValue, NewValue: res.NewValue}, nil
}

// Kill implements [world.Documents] with the module's `kill`.
func (w *Linked) Kill(ctx context.Context, user *world.User, uuid string) (world.KillResult, error) {
	r, err := w.request(ctx, user, "kill", map[string]any{"uuid": uuid})
	if err != nil {
		return world.KillResult{}, err
	}
	var results []struct {
		UUID    string `json:"uuid"`
		Message string `json:"message"`
	}
	if err := r.decode("results", &results); err != nil || len(results) == 0 {
		return world.KillResult{}, badReply(w.clientID, "kill", "no results")
	}
	return world.KillResult{UUID: results[0].UUID, Message: results[0].Message}, nil
}

// Search implements [world.DocumentSearch] with the module's `search`.
func (w *Linked) Search(ctx context.Context, user *world.User, p world.SearchParams) ([]world.Document, error) {
	params := map[string]any{"query": p.Query}
	param(params, "filter", p.Filter)
	param(params, "limit", p.Limit)
	r, err := w.request(ctx, user, "search", params)
	if err != nil {
		return nil, err
	}
	results := []world.Document{}
	if err := r.decode("results", &results); err != nil {
		return nil, badReply(w.clientID, "search", "results are not a list of documents")
	}
	return results, nil
}

// Folders.

// CreateFolder implements [world.Folders] with the module's
// `create-folder`.
func (w *Linked) CreateFolder(ctx context.Context, user *world.User, p world.FolderParams) (world.Document, error) {
	params := map[string]any{"name": p.Name, "folderType": p.Type}
	param(params, "parentFolderId", p.ParentID)
	param(params, "folderId", p.ID)
	r, err := w.request(ctx, user, "create-folder", params)
	if err != nil {
		return nil, err
	}
	var data world.Document
	if err := r.decode("data", &data); err != nil || data == nil {
		return nil, badReply(w.clientID, "create-folder", "no data")
	}
	return data, nil
}

// DeleteFolder implements [world.Folders] with the module's
// `delete-folder`.
func (w *Linked) DeleteFolder(ctx context.Context, user *world.User, folderID string, deleteAll bool) (world.FolderDeletion, error) {
	r, err := w.request(ctx, user, "delete-folder", map[string]any{"folderId": folderID, "deleteAll": deleteAll})
	if err != nil {
		return world.FolderDeletion{}, err
	}
	var data struct {
		FolderID        string `json:"folderId"`
		EntitiesDeleted int    `json:"entitiesDeleted"`
		FoldersDeleted  int    `json:"foldersDeleted"`
	}
	if err := r.decode("data", &data); err != nil {
		return world.FolderDeletion{}, badReply(w.clientID, "delete-folder", err.Error())
	}
	return world.FolderDeletion{FolderID: data.FolderID, EntitiesDeleted: data.EntitiesDeleted, FoldersDeleted: data.FoldersDeleted}, nil
}

// Selection.

// Select implements [world.Selection] with the module's `select`.
func (w *Linked) Select(ctx context.Context, user *world.User, p world.SelectParams) ([]string, error) {
	params := map[string]any{}
	if len(p.UUIDs) > 0 {
		params["uuids"] = p.UUIDs
	}
	param(params, "name", p.Name)
	param(params, "all", p.All)
	param(params, "overwrite", p.Overwrite)
	if len(p.Match) > 0 {
		params["data"] = p.Match
	}
	r, err := w.request(ctx, user, "select", params)
	if err != nil {
		return nil, err
	}
	selected := []string{}
	if err := r.decode("selected", &selected); err != nil {
		return nil, badReply(w.clientID, "select", err.Error())
	}
	return selected, nil
}

// Selected implements [world.Selection] with the module's `selected`.
func (w *Linked) Selected(ctx context.Context, user *world.User) ([]world.SelectedToken, error) {
	r, err := w.request(ctx, user, "selected", nil)
	if err != nil {
		return nil, err
	}
	var tokens []struct {
		TokenUUID string  `json:"tokenUuid"`
		ActorUUID *string `json:"actorUuid"`
	}
	if err := r.decode("selected", &tokens); err != nil {
		return nil, badReply(w.clientID, "selected", err.Error())
	}
	out := make([]world.SelectedToken, len(tokens))
	for i, t := range tokens {
		out[i].TokenUUID = t.TokenUUID
		if t.ActorUUID != nil {
			out[i].ActorUUID = *t.ActorUUID
		}
	}
	return out, nil
}

// remarshal decodes the moduleReply's top-level fields into v.
func remarshal(r moduleReply, v any) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("unexpected fields: %w", err)
	}
	return nil
}

// Encounters.

// encounterReply is an encounter as the module summarises it (reference
// §5).
type encounterReply struct {
	ID         string `json:"id"`
	Name       string `json:"name"`
	Round      int    `json:"round"`
	Turn       int    `json:"turn"`
	Current    bool   `json:"current"`
	Combatants []struct {
		ID         string   `json:"id"`
		Name       string   `json:"name"`
		TokenUUID  *string  `json:"tokenUuid"`
		ActorUUID  *string  `json:"actorUuid"`
		Img        *string  `json:"img"`
		Initiative *float64 `json:"initiative"`
		Hidden     bool     `json:"hidden"`
		Defeated   bool     `json:"defeated"`
	} `json:"combatants"`
}

// encounter converts the module's summary. The module lists encounters
// that were started only (it starts each one it creates), so Started is
// a round above zero.
func (e encounterReply) encounter() world.Encounter {
	out := world.Encounter{ID: e.ID, Name: e.Name, Round: e.Round, Turn: e.Turn, Current: e.Current, Started: e.Round > 0,
		Combatants: make([]world.Combatant, len(e.Combatants))}
	for i, c := range e.Combatants {
		out.Combatants[i] = world.Combatant{ID: c.ID, Name: c.Name, TokenUUID: deref(c.TokenUUID), ActorUUID: deref(c.ActorUUID),
			Img: deref(c.Img), Initiative: c.Initiative, Hidden: c.Hidden, Defeated: c.Defeated}
	}
	return out
}

// deref returns *s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ListEncounters implements [world.Encounters] with the module's
// `encounters`.
func (w *Linked) ListEncounters(ctx context.Context, user *world.User) ([]world.Encounter, error) {
	r, err := w.request(ctx, user, "encounters", nil)
	if err != nil {
		return nil, err
	}
	var list []encounterReply
	if err := r.decode("encounters", &list); err != nil {
		return nil, badReply(w.clientID, "encounters", err.Error())
	}
	out := make([]world.Encounter, len(list))
	for i, e := range list {
		out[i] = e.encounter()
	}
	return out, nil
}

// StartEncounter implements [world.Encounters] with the module's
// `start-encounter`.
func (w *Linked) StartEncounter(ctx context.Context, user *world.User, p world.StartEncounterParams) (world.Encounter, error) {
	params := map[string]any{}
	param(params, "name", p.Name)
	if len(p.TokenUUIDs) > 0 {
		params["tokenUuids"] = p.TokenUUIDs
	}
	param(params, "startWithSelected", p.WithSelected)
	param(params, "startWithPlayers", p.WithPlayers)
	param(params, "rollNPC", p.RollNPC)
	param(params, "rollAll", p.RollAll)
	r, err := w.request(ctx, user, "start-encounter", params)
	if err != nil {
		return world.Encounter{}, err
	}
	var e encounterReply
	if err := r.decode("encounter", &e); err != nil || e.ID == "" {
		return world.Encounter{}, badReply(w.clientID, "start-encounter", "no encounter")
	}
	// The module makes the encounter it started the active one.
	e.Current = true
	return e.encounter(), nil
}

// EndEncounter implements [world.Encounters] with the module's
// `end-encounter`.
func (w *Linked) EndEncounter(ctx context.Context, user *world.User, encounterID string) (string, error) {
	params := map[string]any{}
	param(params, "encounterId", encounterID)
	r, err := w.request(ctx, user, "end-encounter", params)
	if err != nil {
		return "", err
	}
	var id string
	if err := r.decode("encounterId", &id); err != nil {
		return "", badReply(w.clientID, "end-encounter", err.Error())
	}
	return id, nil
}

// navigationTypes are the module's request types for the turn and round
// moves (reference §5: the previous moves are `last-turn`/`last-round`).
var navigationTypes = map[world.EncounterAction]string{
	world.NextTurn: "next-turn", world.NextRound: "next-round",
	world.PreviousTurn: "last-turn", world.PreviousRound: "last-round",
}

// NavigateEncounter implements [world.Encounters] with the module's
// `next-turn`, `next-round`, `last-turn` and `last-round`. The module
// sends a failed `last-round` under another type (reference §5), which
// the relay cannot match: that failure surfaces as the reply time-out.
func (w *Linked) NavigateEncounter(ctx context.Context, user *world.User, encounterID string, action world.EncounterAction) (world.EncounterPosition, error) {
	requestType, ok := navigationTypes[action]
	if !ok {
		return world.EncounterPosition{}, world.Errorf(world.ErrInvalid, "Unknown encounter action: %s", action)
	}
	params := map[string]any{}
	param(params, "encounterId", encounterID)
	r, err := w.request(ctx, user, requestType, params)
	if err != nil {
		return world.EncounterPosition{}, err
	}
	var out struct {
		EncounterID  string         `json:"encounterId"`
		Action       string         `json:"action"`
		CurrentTurn  int            `json:"currentTurn"`
		CurrentRound int            `json:"currentRound"`
		ActorTurn    *string        `json:"actorTurn"`
		TokenTurn    *string        `json:"tokenTurn"`
		Encounter    encounterReply `json:"encounter"`
	}
	if err := remarshal(r, &out); err != nil {
		return world.EncounterPosition{}, badReply(w.clientID, requestType, err.Error())
	}
	enc := out.Encounter.encounter()
	enc.Current = true
	// The module's answer names the encounter without its combatants:
	// the list of encounters has them.
	if out.Encounter.Combatants == nil {
		list, err := w.ListEncounters(ctx, user)
		if err != nil {
			return world.EncounterPosition{}, err
		}
		for _, e := range list {
			if e.ID == enc.ID {
				enc.Combatants = e.Combatants
			}
		}
	}
	return world.EncounterPosition{EncounterID: out.EncounterID, Action: world.EncounterAction(out.Action),
		Round: out.CurrentRound, Turn: out.CurrentTurn, ActorUUID: deref(out.ActorTurn), TokenUUID: deref(out.TokenTurn),
		Encounter: enc}, nil
}

// members sends an add or a remove.
func (w *Linked) members(ctx context.Context, user *world.User, requestType, doneField string, p world.EncounterMembersParams) (world.EncounterMembersResult, error) {
	params := map[string]any{"uuids": p.UUIDs}
	if p.UUIDs == nil {
		params["uuids"] = []string{}
	}
	param(params, "encounterId", p.EncounterID)
	param(params, "selected", p.Selected)
	param(params, "rollInitiative", p.RollInitiative)
	r, err := w.request(ctx, user, requestType, params)
	if err != nil {
		return world.EncounterMembersResult{}, err
	}
	var out struct {
		EncounterID string `json:"encounterId"`
		Failed      []struct {
			UUID   string `json:"uuid"`
			Reason string `json:"reason"`
		} `json:"failed"`
	}
	done := []string{}
	if err := remarshal(r, &out); err != nil || r.decode(doneField, &done) != nil {
		return world.EncounterMembersResult{}, badReply(w.clientID, requestType, "unexpected fields")
	}
	res := world.EncounterMembersResult{EncounterID: out.EncounterID, Done: done, Failed: make([]world.FailedUUID, len(out.Failed))}
	for i, f := range out.Failed {
		res.Failed[i] = world.FailedUUID{UUID: f.UUID, Reason: f.Reason}
	}
	return res, nil
}

// AddToEncounter implements [world.Encounters] with the module's
// `add-to-encounter`.
func (w *Linked) AddToEncounter(ctx context.Context, user *world.User, p world.EncounterMembersParams) (world.EncounterMembersResult, error) {
	return w.members(ctx, user, "add-to-encounter", "added", p)
}

// RemoveFromEncounter implements [world.Encounters] with the module's
// `remove-from-encounter`.
func (w *Linked) RemoveFromEncounter(ctx context.Context, user *world.User, p world.EncounterMembersParams) (world.EncounterMembersResult, error) {
	return w.members(ctx, user, "remove-from-encounter", "removed", p)
}

// Files.

// ListFiles implements [world.Files] with the module's `file-system`. The
// module browses at most three levels below the path and takes no depth:
// the relay keeps the levels asked for (as the embedded world counts them)
// of what the module lists. The module reports neither sizes nor times
// (they are zero).
func (w *Linked) ListFiles(ctx context.Context, user *world.User, p world.ListFilesParams) (string, []world.FileEntry, error) {
	dir, err := cleanDirPath(p.Path)
	if err != nil {
		return "", nil, err
	}
	depth, err := listingDepth(p.Recursive, p.Depth)
	if err != nil {
		return "", nil, err
	}
	params := map[string]any{"path": dir, "source": "data"}
	param(params, "recursive", p.Recursive && depth > 1)
	r, err := w.request(ctx, user, "file-system", params)
	if err != nil {
		return "", nil, err
	}
	var out struct {
		Path    string `json:"path"`
		Results []struct {
			Name string `json:"name"`
			Path string `json:"path"`
			Type string `json:"type"`
			Size int64  `json:"size"`
		} `json:"results"`
	}
	if err := remarshal(r, &out); err != nil {
		return "", nil, badReply(w.clientID, "file-system", err.Error())
	}
	entries := make([]world.FileEntry, 0, len(out.Results))
	for _, e := range out.Results {
		if levelBelow(dir, e.Path) <= depth {
			entries = append(entries, world.FileEntry{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size})
		}
	}
	return out.Path, entries, nil
}

// Scripts.

// ExecuteJS implements [world.Scripts] with the module's `execute-js`:
// the script runs in the game master's browser, under the module's own
// rules (its setting that allows scripts, the role it asks of the user).
// The module returns no console output, and its time limit is the hub's
// reply time-out, whatever opts ask.
func (w *Linked) ExecuteJS(ctx context.Context, user *world.User, script string, _ world.ScriptOptions) (world.ScriptResult, error) {
	r, err := w.request(ctx, user, "execute-js", map[string]any{"script": script})
	if err != nil {
		return world.ScriptResult{}, err
	}
	var value any
	if err := r.decode("result", &value); err != nil {
		return world.ScriptResult{}, badReply(w.clientID, "execute-js", err.Error())
	}
	return world.ScriptResult{Value: value, Logs: []string{}}, nil
}
