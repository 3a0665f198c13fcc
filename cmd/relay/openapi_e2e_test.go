package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/relaytest"
)

// contractCheck sends calls to a relay and checks every answer against the
// OpenAPI document: the operation the call reached, the response the
// document gives its status and content type, and the body against that
// response's schema. It records which operations answered with success,
// and the first successful call of each, to test the document's required
// fields afterwards.
type contractCheck struct {
	t       *testing.T
	tr      *testRelay
	doc     *oaDoc
	covered map[string]bool
	first   map[string]recordedCall
}

// recordedCall is a call that succeeded, to be sent again without each of
// its required parameters.
type recordedCall struct {
	method, path string
	query        url.Values
	body         map[string]any
}

// call sends a JSON (or body-less) call with the admin key and checks its
// answer.
func (c *contractCheck) call(method, path string, query url.Values, body map[string]any) relaytest.Response {
	c.t.Helper()
	var b any
	if body != nil {
		b = body
	}
	resp := c.tr.Do(method, path, c.tr.AdminKey, query, b)
	if op := c.check(method, path, resp); op != "" && resp.Status == http.StatusOK {
		if _, seen := c.first[op]; !seen {
			c.first[op] = recordedCall{method: method, path: path, query: query, body: body}
		}
	}
	return resp
}

// ok is call for a call that must succeed; it returns the envelope's data.
func (c *contractCheck) ok(method, path string, query url.Values, body map[string]any) map[string]any {
	c.t.Helper()
	resp := c.call(method, path, query, body)
	if resp.Status != http.StatusOK {
		c.t.Fatalf("%s %s: %d %s", method, path, resp.Status, resp.Body)
	}
	var env struct {
		Data any `json:"data"`
	}
	if err := json.Unmarshal(resp.Body, &env); err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	data, _ := env.Data.(map[string]any)
	return data
}

// check validates one answer and returns the operation id it reached.
func (c *contractCheck) check(method, path string, resp relaytest.Response) string {
	c.t.Helper()
	op, found := c.doc.find(method, path)
	if !found {
		c.t.Errorf("%s %s: no operation in the document", method, path)
		return ""
	}
	contentType := resp.Header.Get("Content-Type")
	schema, ok := c.doc.responseSchema(op, resp.Status, contentType)
	mediaType, _, _ := mime.ParseMediaType(contentType)
	if !ok && mediaType != "application/json" && resp.Status == http.StatusOK {
		// A download's bytes come with the file's own type; the document
		// describes them as application/octet-stream.
		schema, ok = c.doc.responseSchema(op, resp.Status, "application/octet-stream")
	}
	if !ok {
		c.t.Errorf("%s %s: the document has no %d %s answer: %s", method, path, resp.Status, contentType, resp.Body)
		return op.id
	}
	if mediaType == "application/json" {
		var v any
		if err := json.Unmarshal(resp.Body, &v); err != nil {
			c.t.Errorf("%s %s: %v", method, path, err)
		}
		for _, e := range c.doc.validate(schema, v, "body") {
			c.t.Errorf("%s %s (%d): %s", method, path, resp.Status, e)
		}
	}
	if resp.Status/100 == 2 {
		c.covered[op.id] = true
	}
	return op.id
}

// checkFrames validates the frames of an event stream against the
// stream's text/event-stream schema and returns the event names seen.
func (c *contractCheck) checkFrames(path string, frames []sseFrame) map[string]bool {
	c.t.Helper()
	op, _ := c.doc.find(http.MethodGet, path)
	schema, ok := c.doc.responseSchema(op, http.StatusOK, "text/event-stream")
	if !ok {
		c.t.Fatalf("%s: no event-stream schema", path)
	}
	seen := map[string]bool{}
	for _, f := range frames {
		if f.comment != "" {
			continue
		}
		frame := map[string]any{"event": f.event}
		if f.id != "" {
			frame["id"] = f.id
		}
		var data any
		if err := json.Unmarshal([]byte(f.data), &data); err != nil {
			c.t.Errorf("%s %s: data is not JSON: %v", path, f.event, err)
		}
		frame["data"] = data
		for _, e := range c.doc.validate(schema, frame, f.event) {
			c.t.Errorf("%s: %s (data %s)", path, e, f.data)
		}
		seen[f.event] = true
	}
	c.covered[op.id] = true
	return seen
}

// drain reads a stream's frames until it has been quiet for a while.
func drain(s *sseClient) []sseFrame {
	var out []sseFrame
	for {
		select {
		case f, ok := <-s.frames:
			if !ok {
				return out
			}
			out = append(out, f)
		case <-time.After(500 * time.Millisecond):
			return out
		}
	}
}

// TestOpenAPIDescribesAnswers calls every operation of the OpenAPI
// document on a real relay, as the GM and as a player, and checks every
// answer and every streamed event against the document (undescribed
// fields included); then it sends each successful call again without each
// parameter the document marks required, which must be refused with a 400
// naming it.
func TestOpenAPIDescribesAnswers(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	c := &contractCheck{t: t, tr: tr, doc: loadOADoc(t), covered: map[string]bool{}, first: map[string]recordedCall{}}

	// Streams first, so that they see the events of everything below: as
	// the GM on every channel, and as Alice (LIMITED and filtered payloads).
	streams := map[string]*sseClient{}
	for _, p := range []string{"/hooks/subscribe", "/encounters/subscribe", "/actor/subscribe", "/scene/subscribe"} {
		streams[p] = tr.openStream(p, tr.AdminKey, nil, nil)
	}
	aliceActors := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("userId", "Alice"), nil)
	aliceHooks := tr.openStream("/hooks/subscribe", tr.AdminKey, relaytest.Q("userId", "Alice"), nil)
	alice := relaytest.Q("userId", "Alice")

	// Public paths.
	for _, p := range []string{"/healthz", "/openapi.json", "/docs"} {
		c.check(http.MethodGet, p, tr.Do(http.MethodGet, p, "", nil, nil))
	}

	// Documents.
	c.ok("GET", "/get", relaytest.Q("uuid", relaytest.AriaUUID), nil)
	c.ok("GET", "/get", relaytest.Q("uuid", relaytest.GuardUUID, "userId", "Alice"), nil)
	c.ok("GET", "/get", relaytest.Q("uuid", relaytest.TavernScene), nil)
	c.ok("PUT", "/update", nil, map[string]any{"uuid": relaytest.AriaUUID, "data": map[string]any{"system.attributes.hp.value": 20, "name": "Aria Vale"}})
	created := c.ok("POST", "/create", nil, map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Contract Orc", "type": "npc"}})
	orc := created["uuid"].(string)
	c.ok("POST", "/create", nil, map[string]any{"entityType": "Item", "parentUuid": orc, "data": map[string]any{"name": "Club", "type": "weapon"}})
	c.ok("GET", "/search", relaytest.Q("query", "a"), nil)
	c.ok("GET", "/search", relaytest.Q("query", "a", "userId", "Alice"), nil)
	c.ok("GET", "/structure", nil, nil)
	c.ok("GET", "/structure", relaytest.Q("includeEntityData", "true", "recursive", "true", "userId", "Alice"), nil)
	c.ok("GET", "/structure", relaytest.Q("shape", "module"), nil)
	c.ok("GET", "/structure", relaytest.Q("shape", "module", "includeEntityData", "true", "recursive", "true", "userId", "Alice"), nil)
	c.ok("GET", "/structure", relaytest.Q("shape", "module", "path", "Folder."+relaytest.HeroesID), nil)
	c.ok("POST", "/give", nil, map[string]any{"toUuid": relaytest.AriaUUID, "itemUuid": relaytest.PotionUUID})
	c.ok("POST", "/remove", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Potion of Healing"})
	c.ok("POST", "/decrease", nil, map[string]any{"uuid": relaytest.AriaUUID, "attribute": "system.attributes.hp.value", "amount": 1})
	c.ok("POST", "/increase", nil, map[string]any{"uuid": relaytest.AriaUUID, "attribute": "system.attributes.hp.value", "amount": 1})
	c.ok("POST", "/kill", nil, map[string]any{"uuid": orc})
	c.ok("DELETE", "/delete", relaytest.Q("uuid", orc), nil)

	// Folders, the canvas, scripts.
	folder := c.ok("POST", "/create-folder", nil, map[string]any{"name": "Contract", "folderType": "Actor", "parentFolderId": relaytest.HeroesID})
	c.ok("DELETE", "/delete-folder", relaytest.Q("folderId", folder["id"].(string)), nil)
	c.ok("POST", "/select", nil, map[string]any{"uuids": []string{goblinTokenUUID}})
	c.ok("GET", "/selected", nil, nil)
	c.ok("POST", "/execute-js", nil, map[string]any{"script": `return {n: 1, list: [1, "a"]}`})
	c.ok("POST", "/execute-js", nil, map[string]any{"script": `console.log("x")`})

	// Scenes and tokens (the scene channel).
	c.ok("PUT", "/update", nil, map[string]any{"uuid": relaytest.TavernScene, "data": map[string]any{"navName": "The Tavern"}})
	cellar := c.ok("POST", "/create", nil, map[string]any{"entityType": "Scene", "data": map[string]any{"name": "Cellar"}})["uuid"].(string)
	c.ok("PUT", "/update", nil, map[string]any{"uuid": cellar, "data": map[string]any{"active": true}})
	token := c.ok("POST", "/create", nil, map[string]any{"entityType": "Token", "parentUuid": relaytest.TavernScene, "data": map[string]any{"name": "Rat", "x": 100, "y": 100}})["uuid"].(string)
	c.ok("PUT", "/update", nil, map[string]any{"uuid": token, "data": map[string]any{"x": 200}})
	c.ok("DELETE", "/delete", relaytest.Q("uuid", token), nil)
	c.ok("PUT", "/update", nil, map[string]any{"uuid": relaytest.TavernScene, "data": map[string]any{"active": true}})

	// Fifth-edition operations.
	all := `["resources","items","spells","features","stats","abilities","skills","details","conditions"]`
	c.ok("GET", "/dnd5e/get-actor-details", relaytest.Q("actorUuid", relaytest.AriaUUID, "details", all), nil)
	c.ok("GET", "/dnd5e/get-actor-details", relaytest.Q("actorUuid", relaytest.BromUUID, "details", `["stats"]`), nil)
	c.ok("POST", "/dnd5e/modify-item-charges", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "itemUuid": relaytest.WandUUID, "amount": -1})
	c.ok("POST", "/dnd5e/skill-check", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "skill": "arc", "advantage": true})
	c.ok("POST", "/dnd5e/ability-save", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "ability": "dex", "createChatMessage": false})
	c.ok("POST", "/dnd5e/ability-check", nil, map[string]any{"actorUuid": relaytest.BromUUID, "ability": "str", "bonus": "1d4"})
	c.ok("POST", "/dnd5e/use-spell", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Fire Bolt", "targetName": "Goblin"})
	c.ok("POST", "/dnd5e/use-spell", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "abilityName": "Hold Person", "targetName": "Goblin"})
	c.ok("GET", "/dnd5e/concentration", relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	c.ok("POST", "/dnd5e/concentration-save", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "damage": 4})
	c.ok("POST", "/dnd5e/break-concentration", nil, map[string]any{"actorUuid": relaytest.AriaUUID})
	c.ok("GET", "/dnd5e/concentration", relaytest.Q("actorUuid", relaytest.AriaUUID), nil)
	c.ok("POST", "/dnd5e/use-feature", nil, map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Second Wind"})
	c.ok("POST", "/dnd5e/use-ability", nil, map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetName": "Goblin"})
	c.ok("POST", "/dnd5e/use-item", nil, map[string]any{"actorUuid": relaytest.BromUUID, "abilityName": "Longsword", "targetName": "Goblin"})
	c.ok("POST", "/dnd5e/equip-item", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Ring of Protection", "equipped": true})
	c.ok("POST", "/dnd5e/attune-item", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "itemName": "Ring of Protection", "attuned": true})
	c.ok("POST", "/dnd5e/transfer-currency", nil, map[string]any{"sourceActorUuid": relaytest.BromUUID, "targetActorUuid": relaytest.AriaUUID, "currency": map[string]any{"gp": 1}})
	c.ok("POST", "/dnd5e/modify-currency", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "currency": "gp", "amount": 5})
	c.ok("POST", "/dnd5e/modify-experience", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "amount": 10})
	c.ok("POST", "/dnd5e/prepare-spell", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "spellName": "Shield", "prepared": false})
	c.ok("POST", "/dnd5e/short-rest", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "autoHD": true})
	c.ok("POST", "/dnd5e/long-rest", nil, map[string]any{"actorUuid": relaytest.BromUUID})
	c.ok("PUT", "/update", nil, map[string]any{"uuid": relaytest.BromUUID, "data": map[string]any{"system.attributes.hp.value": 0}})
	c.ok("POST", "/dnd5e/death-save", nil, map[string]any{"actorUuid": relaytest.BromUUID})
	c.ok("GET", "/dnd5e/get-actor-details", relaytest.Q("actorUuid", relaytest.AriaUUID, "details", `["stats"]`, "userId", "Alice"), nil)

	// Combat (the combat channel and its hooks).
	enc := c.ok("POST", "/start-encounter", nil, map[string]any{"name": "Contract brawl", "tokenUuids": []string{ariaTokenUUID, goblinTokenUUID}, "rollAll": true})
	id := map[string]any{"encounterId": enc["encounterId"]}
	c.ok("GET", "/encounters", nil, nil)
	c.ok("GET", "/encounters", alice, nil)
	c.ok("POST", "/add-to-encounter", nil, map[string]any{"uuids": []string{bromTokenUUID}, "rollInitiative": true})
	c.ok("POST", "/next-turn", nil, id)
	c.ok("POST", "/next-round", nil, id)
	c.ok("POST", "/next-turn", nil, id)
	c.ok("POST", "/previous-turn", nil, id)
	c.ok("POST", "/last-turn", nil, id)
	c.ok("POST", "/next-round", nil, id)
	c.ok("POST", "/previous-round", nil, id)
	c.ok("POST", "/next-round", nil, id)
	c.ok("POST", "/last-round", nil, id)
	c.ok("POST", "/remove-from-encounter", nil, map[string]any{"uuids": []string{bromTokenUUID}})
	c.ok("POST", "/end-encounter", nil, id)

	// Files.
	c.ok("GET", "/file-system", relaytest.Q("recursive", "true"), nil)
	c.check("GET", "/download", tr.Do("GET", "/download", tr.AdminKey, relaytest.Q("path", "maps/tavern.svg"), nil))
	c.ok("GET", "/download", relaytest.Q("path", "handouts/welcome.md", "format", "base64"), nil)
	c.ok("POST", "/upload", nil, map[string]any{"path": "notes", "filename": "contract.txt", "fileData": "data:text/plain;base64,aGk="})
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("path", "notes")
	fw, _ := mw.CreateFormFile("file", "contract.bin")
	_, _ = fw.Write([]byte{1, 2, 3})
	_ = mw.Close()
	c.check("POST", "/upload", tr.send("POST", "/upload", tr.AdminKey, nil, &form, mw.FormDataContentType()))

	// Tickets, worlds, keys, pairing.
	c.ok("POST", "/stream-tickets", nil, map[string]any{})
	c.ok("GET", "/clients", nil, nil)
	key := c.ok("POST", "/keys", nil, map[string]any{"name": "contract", "scopes": []string{"entity:read"}, "clientIds": []string{"demo"}, "clientUsers": map[string]any{"demo": "Alice"}})
	c.ok("GET", "/keys", nil, nil)
	keyID := key["apiKey"].(map[string]any)["id"].(string)
	c.ok("DELETE", "/keys/"+keyID, nil, nil)
	code := c.ok("POST", "/pairing-codes", nil, map[string]any{})
	paired, err := tr.tabletop().Pair(context.Background(), code["code"].(string))
	if err != nil {
		t.Fatal(err)
	}
	c.ok("DELETE", "/linked-worlds/"+paired.ClientID, nil, nil)

	// Accounts.
	acct := c.ok("POST", "/accounts", nil, map[string]any{"name": "contract", "quotas": map[string]any{"worlds": 2}})
	acctID := acct["account"].(map[string]any)["id"].(string)
	c.ok("GET", "/accounts", nil, nil)
	c.ok("GET", "/accounts/"+acctID, nil, nil)
	c.ok("PATCH", "/accounts/"+acctID, nil, map[string]any{"name": "contract two"})
	c.ok("POST", "/accounts/"+acctID+"/suspend", nil, nil)
	c.ok("POST", "/accounts/"+acctID+"/resume", nil, nil)
	c.ok("DELETE", "/accounts/"+acctID, nil, nil)
	c.ok("POST", "/account/password", nil, map[string]any{"newPassword": "the operator's password"})
	invite := c.ok("POST", "/invites", nil, map[string]any{"expiresInSeconds": 3600})
	c.ok("GET", "/invites", nil, nil)
	c.ok("DELETE", "/invites/"+invite["invite"].(map[string]any)["id"].(string), nil, nil)

	// Embedded worlds.
	c.ok("POST", "/worlds", nil, map[string]any{"clientId": "contract-world", "title": "Contract", "seed": "empty"})
	c.ok("DELETE", "/worlds/contract-world", nil, nil)

	// The audit log.
	c.ok("GET", "/audit", relaytest.Q("limit", "5"), nil)

	// Failures: each kind of refusal has the error body.
	c.call("GET", "/get", relaytest.Q("uuid", "Actor.nobody0000000001"), nil)
	c.call("GET", "/get", relaytest.Q("uuid", relaytest.GoblinUUID, "userId", "Alice"), nil)
	c.call("GET", "/get", relaytest.Q("uuid", relaytest.AriaUUID, "userId", "Mallory"), nil)
	c.check("GET", "/get", tr.Do("GET", "/get", "", relaytest.Q("uuid", relaytest.AriaUUID), nil))
	c.check("GET", "/download", tr.Do("GET", "/download", tr.AdminKey, relaytest.Q("path", "maps/none.png"), nil))
	c.call("POST", "/dnd5e/modify-currency", nil, map[string]any{"actorUuid": relaytest.AriaUUID, "currency": "gp", "amount": -100000})

	// A resume point from the future: connected, then reset.
	reset := tr.openStream("/actor/subscribe", tr.AdminKey, relaytest.Q("lastEventId", "999999"), nil)
	reset.expect("connected", "reset")

	// Every streamed event matches the document, and every kind of event
	// the document lists arrived.
	want := map[string][]string{
		"/actor/subscribe":      {"connected", "actor-update", "actor-item-add", "actor-item-update", "actor-item-remove", "actor-effect-add", "actor-effect-remove"},
		"/scene/subscribe":      {"connected", "scene-update", "scene-activate", "scene-token-create", "scene-token-update", "scene-token-delete"},
		"/encounters/subscribe": {"connected", "combat-start", "combat-turn", "combat-round", "combat-end", "combat-combatant-add", "combat-combatant-remove"},
		"/hooks/subscribe":      {"connected", "createActor", "updateActor", "deleteActor", "createToken", "updateToken", "deleteToken", "createChatMessage", "combatStart", "combatTurn", "combatRound"},
	}
	for path, s := range streams {
		seen := c.checkFrames(path, drain(s))
		for _, name := range want[path] {
			if !seen[name] {
				t.Errorf("%s: no %s event arrived (saw %v)", path, name, sortedKeys(seen))
			}
		}
	}
	c.checkFrames("/actor/subscribe", drain(aliceActors))
	c.checkFrames("/hooks/subscribe", drain(aliceHooks))
	c.checkFrames("/actor/subscribe", drain(reset))

	// The document asks for a key on every operation but its public ones,
	// and each of those refuses a call without one with a 401.
	for _, op := range c.doc.operations() {
		security, declared := op.op["security"].([]any)
		if declared && len(security) == 0 {
			if !strings.HasPrefix(op.id, "Relay_") {
				t.Errorf("%s %s needs no key in the document", op.method, op.path)
			}
			continue
		}
		path := strings.NewReplacer("{id}", "x", "{clientId}", "x").Replace(op.path)
		resp := tr.Do(op.method, path, "", nil, nil)
		c.check(op.method, path, resp)
		if resp.Status != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d", op.method, path, resp.Status)
		}
	}

	// Every operation of the document answered with success at least once.
	for _, op := range c.doc.operations() {
		if !c.covered[op.id] {
			t.Errorf("%s %s (%s) was not called", op.method, op.path, op.id)
		}
	}

	// Each required parameter, left out of a call that succeeded, is
	// refused with a 400 that names it.
	ids := sortedKeys(c.first)
	for _, opID := range ids {
		call := c.first[opID]
		op, _ := c.doc.find(call.method, call.path)
		for _, name := range c.doc.requiredParams(op) {
			query, body := without(call.query, name), withoutKey(call.body, name)
			var b any
			if body != nil {
				b = body
			}
			resp := tr.Do(call.method, call.path, tr.AdminKey, query, b)
			c.check(call.method, call.path, resp)
			// The error names the parameter (`scope` for `scopes` will do).
			if resp.Status != http.StatusBadRequest || !strings.Contains(strings.ToLower(resp.ErrorText(t)), strings.TrimSuffix(strings.ToLower(name), "s")) {
				t.Errorf("%s %s without required %q: %d %s", call.method, call.path, name, resp.Status, resp.Body)
			}
		}
	}
}

// requiredParams lists the parameters an operation marks required: query
// parameters and the JSON body's required members (path parameters are
// part of the path).
func (d *oaDoc) requiredParams(op oaOperation) []string {
	var out []string
	params, _ := op.op["parameters"].([]any)
	for _, p := range params {
		pm := d.deref(p)
		if pm["required"] == true && pm["in"] == "query" {
			out = append(out, fmt.Sprint(pm["name"]))
		}
	}
	if rb := d.deref(op.op["requestBody"]); rb != nil {
		content, _ := rb["content"].(map[string]any)
		if media, ok := content["application/json"].(map[string]any); ok {
			out = append(out, asList(d.deref(media["schema"])["required"])...)
		}
	}
	return out
}

func without(v url.Values, name string) url.Values {
	if v == nil {
		return nil
	}
	out := url.Values{}
	for k, vs := range v {
		if k != name {
			out[k] = vs
		}
	}
	return out
}

func withoutKey(m map[string]any, name string) map[string]any {
	if m == nil {
		return nil
	}
	out := map[string]any{}
	for k, v := range m {
		if k != name {
			out[k] = v
		}
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
