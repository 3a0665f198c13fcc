package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// otherWorld is the client id of the second world the isolation tests
// create next to the demo world.
const otherWorld = "other"

// restEndpoint is one REST binding of an RPC of the contract, with its
// access rule.
type restEndpoint struct {
	method, path string
	policy       *relayv1.Policy
}

func (e restEndpoint) String() string { return e.method + " " + e.path }

// restEndpoints walks the contract's services, as server/contract_test.go
// does, so a new endpoint is covered by the security tests without an edit
// here.
func restEndpoints(t *testing.T) []restEndpoint {
	t.Helper()
	services, err := server.ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	var out []restEndpoint
	for _, sd := range services {
		methods := sd.Methods()
		for i := range methods.Len() {
			md := methods.Get(i)
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			if rule == nil {
				continue
			}
			ep := restEndpoint{policy: server.MethodPolicy(md)}
			switch p := rule.GetPattern().(type) {
			case *annotations.HttpRule_Get:
				ep.method, ep.path = http.MethodGet, p.Get
			case *annotations.HttpRule_Post:
				ep.method, ep.path = http.MethodPost, p.Post
			case *annotations.HttpRule_Put:
				ep.method, ep.path = http.MethodPut, p.Put
			case *annotations.HttpRule_Delete:
				ep.method, ep.path = http.MethodDelete, p.Delete
			case *annotations.HttpRule_Patch:
				ep.method, ep.path = http.MethodPatch, p.Patch
			default:
				t.Fatalf("%s: unsupported HTTP rule %v", md.FullName(), rule)
			}
			// Path variables (`/keys/{id}`) get a value of the right shape.
			for strings.Contains(ep.path, "{") {
				start, end := strings.Index(ep.path, "{"), strings.Index(ep.path, "}")
				ep.path = ep.path[:start] + "key0000000000001" + ep.path[end+1:]
			}
			out = append(out, ep)
		}
	}
	if len(out) < 50 {
		t.Fatalf("only %d REST endpoints found in the contract", len(out))
	}
	return out
}

// worldDigest hashes everything a refused request could have changed: every
// document of both worlds as the engine holds it, the files of both worlds'
// file areas, and the key store.
func worldDigest(t *testing.T, tr *testRelay) string {
	t.Helper()
	ctx := context.Background()
	h := sha256.New()
	for _, clientID := range []string{demo.ClientID, otherWorld} {
		w, err := tr.Worlds().World(ctx, clientID)
		if err != nil {
			t.Fatal(err)
		}
		err = w.View(ctx, func(v *world.View) error {
			for _, typ := range []string{"Actor", "Item", "Scene", "JournalEntry", "Macro", "Folder", "Combat", "User", "ChatMessage"} {
				var docs [][]byte
				v.Each(typ, func(doc world.Document) bool {
					b, err := json.Marshal(doc) // maps marshal with sorted keys
					if err != nil {
						t.Error(err)
					}
					docs = append(docs, b)
					return true
				})
				slices.SortFunc(docs, func(a, b []byte) int { return strings.Compare(string(a), string(b)) })
				h.Write([]byte(typ))
				for _, d := range docs {
					h.Write(d)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(tr.DataDir, "worlds", clientID, "files")
		_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			h.Write([]byte(path))
			if !d.IsDir() {
				data, _ := os.ReadFile(path)
				h.Write(data)
			}
			return nil
		})
	}
	list, err := tr.Keys().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range list {
		b, _ := json.Marshal(k)
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// securityRelay is a relay with the demo world, a second world, and a key
// for every way of being refused.
type securityRelay struct {
	*testRelay
	revoked, expired string
	otherWorldOnly   string            // every scope, bound to the other world
	alice            string            // every scope, acts as Alice (a player) in every world
	withoutScope     map[string]string // scope → a key holding every other scope
}

// startSecurityRelay starts the relay and makes the keys. The expired key
// expires a second after creation; the function returns once it has.
func startSecurityRelay(t *testing.T) *securityRelay {
	t.Helper()
	tr := startTestRelay(t)
	ctx := context.Background()
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Worlds().Create(ctx, otherWorld, seed); err != nil {
		t.Fatal(err)
	}
	sr := &securityRelay{testRelay: tr, withoutScope: map[string]string{}}
	create := func(spec keys.Spec) string {
		t.Helper()
		plain, _, err := tr.Keys().Create(ctx, spec)
		if err != nil {
			t.Fatal(err)
		}
		return plain
	}
	expiresAt := time.Now().Add(time.Second)
	sr.expired = create(keys.Spec{Name: "expired", Scopes: keys.AllScopes, ExpiresAt: expiresAt})
	var revokedKey keys.Key
	sr.revoked, revokedKey, err = tr.Keys().Create(ctx, keys.Spec{Name: "revoked", Scopes: keys.AllScopes})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Keys().Revoke(ctx, revokedKey.ID); err != nil {
		t.Fatal(err)
	}
	sr.otherWorldOnly = create(keys.Spec{Name: "other world", Scopes: keys.AllScopes, ClientIDs: []string{otherWorld}})
	sr.alice = create(keys.Spec{Name: "alice", Scopes: keys.AllScopes, ScopedUserID: "Alice"})
	for _, scope := range keys.AllScopes {
		others := slices.DeleteFunc(slices.Clone(keys.AllScopes), func(s string) bool { return s == scope })
		sr.withoutScope[scope] = create(keys.Spec{Name: "without " + scope, Scopes: others})
	}
	time.Sleep(time.Until(expiresAt) + 50*time.Millisecond)
	return sr
}

// refusalParams is the query every endpoint is called with: the demo world
// and plausible targets, so that a request that got past the check under
// test would change something.
func refusalParams(extra ...string) url.Values {
	v := relaytest.Q("clientId", demo.ClientID, "uuid", relaytest.GoblinUUID, "actorUuid", relaytest.GoblinUUID, "attribute", "system.attributes.hp.value",
		"amount", "1", "data", `{"name":"Pwned"}`, "entityType", "Actor", "script", "return 1", "name", "pwned", "scopes", "all",
		"path", "icons", "filename", "pwned.txt", "fileData", "cHduZWQ=")
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return v
}

// bodyFor is the body a request is sent with: none for GET, else an empty
// JSON object (the parameters come from the query), except for uploads,
// whose file must be in the body.
func bodyFor(ep restEndpoint) any {
	switch {
	case ep.method == http.MethodGet:
		return nil
	case ep.path == "/upload":
		return map[string]any{"clientId": demo.ClientID, "path": "icons", "filename": "pwned.txt", "fileData": "cHduZWQ="}
	}
	return "{}"
}

func TestSecurityEveryEndpointRefusesAndChangesNothing(t *testing.T) {
	t.Parallel()
	sr := startSecurityRelay(t)
	endpoints := restEndpoints(t)
	before := worldDigest(t, sr.testRelay)

	type refusal struct {
		name   string
		key    string
		query  url.Values
		status int
		// applies tells whether the case is meaningful for an endpoint.
		applies func(restEndpoint) bool
	}
	always := func(restEndpoint) bool { return true }
	worldScoped := func(e restEndpoint) bool { return !e.policy.GetWorldless() }
	cases := []refusal{
		{"no key", "", refusalParams(), http.StatusUnauthorized, always},
		{"unknown key", "relay_notakey000000000000000000000000000000", refusalParams(), http.StatusUnauthorized, always},
		{"revoked key", sr.revoked, refusalParams(), http.StatusUnauthorized, always},
		{"expired key", sr.expired, refusalParams(), http.StatusUnauthorized, always},
		{"key bound to another world", sr.otherWorldOnly, refusalParams(), http.StatusForbidden, worldScoped},
		{"injected user acting as another", sr.alice, refusalParams("userId", "Gamemaster"), http.StatusForbidden, worldScoped},
		{"player on a GM-only operation", sr.alice, refusalParams(), http.StatusForbidden, func(e restEndpoint) bool { return e.policy.GetGmOnly() }},
		{"player without the world permission", sr.alice, refusalParams(), http.StatusForbidden, func(e restEndpoint) bool { return e.policy.GetWorldPermission() != "" }},
	}
	checked := 0
	for _, ep := range endpoints {
		for _, c := range cases {
			if !c.applies(ep) {
				continue
			}
			resp := sr.Do(ep.method, ep.path, c.key, c.query, bodyFor(ep))
			checked++
			if resp.Status != c.status {
				t.Errorf("%v, %s: status %d, want %d: %s", ep, c.name, resp.Status, c.status, resp.Body)
				continue
			}
			if msg := resp.ErrorText(t); msg == "" {
				t.Errorf("%v, %s: no error message: %s", ep, c.name, resp.Body)
			}
		}
		// A key without the endpoint's scope (and every other scope).
		scope := ep.policy.GetScope()
		resp := sr.Do(ep.method, ep.path, sr.withoutScope[scope], refusalParams(), bodyFor(ep))
		checked++
		if resp.Status != http.StatusForbidden {
			t.Errorf("%v, key without scope %s: status %d, want 403: %s", ep, scope, resp.Status, resp.Body)
		}
	}
	if after := worldDigest(t, sr.testRelay); after != before {
		t.Fatalf("refused requests changed the world (%d requests)", checked)
	}
	t.Logf("%d refusals over %d endpoints; world digest unchanged", checked, len(endpoints))
}

// TestSecurityPlayerCannotWriteWhatItObserves: Alice observes Brom
// (OBSERVER); every write aimed at him, his items or his sheet is a 403 and
// changes nothing.
func TestSecurityPlayerCannotWriteWhatItObserves(t *testing.T) {
	t.Parallel()
	sr := startSecurityRelay(t)
	const (
		brom       = relaytest.BromUUID
		bromPotion = relaytest.BromUUID + ".Item.bromPotionHeal01"
		bromSword  = relaytest.BromUUID + ".Item.bromLongsword001"
	)
	writes := []struct {
		method, path string
		params       map[string]any
	}{
		{http.MethodPut, "/update", map[string]any{"uuid": brom, "data": map[string]any{"name": "Pwned"}}},
		{http.MethodPut, "/update", map[string]any{"uuid": bromSword, "data": map[string]any{"name": "Pwned"}}},
		{http.MethodDelete, "/delete", map[string]any{"uuid": brom}},
		{http.MethodDelete, "/delete", map[string]any{"uuid": bromPotion}},
		{http.MethodPost, "/create", map[string]any{"entityType": "Item", "parentUuid": brom, "data": map[string]any{"name": "Pwned", "type": "loot"}}},
		{http.MethodPost, "/increase", map[string]any{"uuid": brom, "attribute": "system.attributes.hp.value", "amount": 5}},
		{http.MethodPost, "/decrease", map[string]any{"uuid": brom, "attribute": "system.attributes.hp.value", "amount": 5}},
		{http.MethodPost, "/kill", map[string]any{"uuid": brom}},
		{http.MethodPost, "/give", map[string]any{"fromUuid": brom, "toUuid": relaytest.AriaUUID, "itemUuid": bromPotion}},
		{http.MethodPost, "/remove", map[string]any{"actorUuid": brom, "itemUuid": bromPotion}},
		{http.MethodPost, "/dnd5e/short-rest", map[string]any{"actorUuid": brom}},
		{http.MethodPost, "/dnd5e/long-rest", map[string]any{"actorUuid": brom}},
		{http.MethodPost, "/dnd5e/modify-experience", map[string]any{"actorUuid": brom, "amount": 100}},
		{http.MethodPost, "/dnd5e/modify-currency", map[string]any{"actorUuid": brom, "currency": "gp", "amount": 100}},
		{http.MethodPost, "/dnd5e/transfer-currency", map[string]any{"sourceActorUuid": brom, "targetActorUuid": relaytest.AriaUUID, "currency": map[string]any{"gp": 1}}},
		{http.MethodPost, "/dnd5e/equip-item", map[string]any{"actorUuid": brom, "itemUuid": bromSword, "equipped": false}},
		{http.MethodPost, "/dnd5e/attune-item", map[string]any{"actorUuid": brom, "itemUuid": bromSword, "attuned": true}},
		{http.MethodPost, "/dnd5e/modify-item-charges", map[string]any{"actorUuid": brom, "itemUuid": bromPotion, "amount": -1}},
		{http.MethodPost, "/dnd5e/use-item", map[string]any{"actorUuid": brom, "abilityUuid": bromPotion}},
		{http.MethodPost, "/dnd5e/use-feature", map[string]any{"actorUuid": brom, "abilityUuid": relaytest.BromUUID + ".Item.secondWind000001"}},
		{http.MethodPost, "/dnd5e/death-save", map[string]any{"actorUuid": brom}},
		{http.MethodPost, "/dnd5e/break-concentration", map[string]any{"actorUuid": brom}},
		{http.MethodPost, "/dnd5e/concentration-save", map[string]any{"actorUuid": brom, "damage": 10}},
		{http.MethodPost, "/dnd5e/prepare-spell", map[string]any{"actorUuid": brom, "spellName": "Second Wind", "prepared": true}},
	}
	before := worldDigest(t, sr.testRelay)
	for _, w := range writes {
		body := map[string]any{"clientId": demo.ClientID}
		for k, v := range w.params {
			body[k] = v
		}
		resp := sr.Do(w.method, w.path, sr.alice, nil, body)
		if resp.Status != http.StatusForbidden {
			t.Errorf("Alice %s %s %v: status %d, want 403: %s", w.method, w.path, w.params, resp.Status, resp.Body)
		}
	}
	if after := worldDigest(t, sr.testRelay); after != before {
		t.Fatal("refused writes changed the world")
	}
	// The same key may write what Alice owns: the refusals above are about
	// permission, not a broken key.
	resp := sr.Do(http.MethodPut, "/update", sr.alice, nil, map[string]any{"clientId": demo.ClientID, "uuid": relaytest.AriaUUID, "data": map[string]any{"system.attributes.hp.value": 3}})
	if resp.Status != http.StatusOK {
		t.Fatalf("Alice updating her own actor: %d %s", resp.Status, resp.Body)
	}
	if worldDigest(t, sr.testRelay) == before {
		t.Fatal("an accepted write left the digest unchanged: the digest sees nothing")
	}
}
