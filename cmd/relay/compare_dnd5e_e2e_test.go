package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link/linktest"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/embedded"
)

// notCarried are the fields of the relay's fifth-edition answers that the
// module's replies do not carry (reference §3.4): what a use consumed, its
// target and saving throw, and whether its attack hit. A linked world
// leaves them empty; the comparison leaves them out. (Whether a use started
// concentration the relay reads from the item, and it is compared.)
var notCarried = []string{"consumed", "target", "save", "hit"}

// TestLinkedDnd5eMatchesEmbedded runs every fifth-edition route of the
// spec, with good and bad input, as the game master and as players,
// against the embedded demo world and against a copy of it linked through
// the simulator, and requires the same status and body, rolls included
// (both sides roll from the same seed), ids and times aside. The
// simulator answers as the module does, laxer than the relay's rules where
// the module is (reference §9.8: LIMITED users roll and read sheets,
// coins and spell preparation without permission checks, coins clamped
// at 0): the refusals it gets right are the relay's own checks.
func TestLinkedDnd5eMatchesEmbedded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	// Times, and the ids of concentration effects, which each world makes
	// up on its own.
	times := []string{"_stats"}
	effectIDs := []string{"id", "uuid", "removedEffectId"}
	dnd := func(method, op string, status int, user string, params map[string]any, ignore ...string) comparison {
		c := comparison{name: op, status: status, method: method, path: "/dnd5e/" + op, ignore: ignore}
		if user != "" {
			c.name += " as " + user
			c.query = relaytest.Q("userId", user)
		}
		if method == http.MethodGet {
			if c.query == nil {
				c.query = url.Values{}
			}
			for k, v := range params {
				switch v := v.(type) {
				case string:
					c.query.Set(k, v)
				default:
					b, _ := json.Marshal(v)
					c.query.Set(k, string(b))
				}
			}
		} else {
			c.body = params
		}
		return c
	}
	get, post := http.MethodGet, http.MethodPost
	all := []string{"resources", "items", "spells", "features", "stats", "abilities", "skills", "details", "conditions"}
	aria := func(kv ...any) map[string]any {
		m := map[string]any{"actorUuid": relaytest.AriaUUID}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	brom := func(kv ...any) map[string]any {
		m := aria(kv...)
		m["actorUuid"] = relaytest.BromUUID
		return m
	}
	calls := []comparison{
		// Reading sheets: the module shows them to LIMITED users, the
		// relay to OBSERVER only.
		dnd(get, "get-actor-details", 200, "", aria("details", all)),
		dnd(get, "get-actor-details", 200, "Alice", aria("details", []string{"stats", "spellSlots"})),
		dnd(get, "get-actor-details", 403, "Alice", map[string]any{"actorUuid": relaytest.GuardUUID, "details": []string{"stats"}}),
		dnd(get, "get-actor-details", 403, "Alice", map[string]any{"actorUuid": relaytest.GoblinUUID, "details": []string{"stats"}}),
		dnd(get, "get-actor-details", 403, "Tess", aria("details", []string{"skills"})),
		dnd(get, "get-actor-details", 400, "", aria()),
		dnd(get, "get-actor-details", 404, "", map[string]any{"actorUuid": "Actor.missing000000001", "details": []string{"stats"}}),
		// Checks and saves; the module rolls for LIMITED users too.
		dnd(post, "skill-check", 200, "", brom("skill", "ath", "bonus", "+2", "createChatMessage", false)),
		dnd(post, "skill-check", 200, "Alice", aria("skill", "arc", "advantage", true)),
		dnd(post, "skill-check", 400, "", brom("skill", "fly")),
		dnd(post, "skill-check", 400, "", brom("skill", "ath", "bonus", "1d")),
		dnd(post, "skill-check", 403, "Alice", map[string]any{"actorUuid": relaytest.GuardUUID, "skill": "ste"}),
		dnd(post, "skill-check", 403, "Alice", map[string]any{"actorUuid": relaytest.GoblinUUID, "skill": "ste"}),
		dnd(post, "skill-check", 403, "Bob", aria("skill", "arc")),
		dnd(post, "skill-check", 403, "Tess", aria("skill", "arc")),
		dnd(post, "ability-save", 200, "Alice", aria("ability", "dex", "disadvantage", true)),
		dnd(post, "ability-save", 400, "Alice", aria("ability", "luck")),
		dnd(post, "ability-check", 200, "", brom("ability", "str", "createChatMessage", false)),
		dnd(post, "ability-check", 403, "Alice", map[string]any{"actorUuid": relaytest.GuardUUID, "ability": "str"}),
		// Death saves: none above 0 hit points (the module then answers
		// without a roll), then rolls.
		dnd(post, "death-save", 400, "Alice", aria()),
		{name: "drop Aria to 0", status: 200, method: http.MethodPut, path: "/update", query: relaytest.Q("uuid", relaytest.AriaUUID),
			body: map[string]any{"data": map[string]any{"system.attributes.hp.value": 0}}, ignore: []string{"_stats"}},
		dnd(post, "death-save", 200, "Alice", aria("createChatMessage", false)),
		dnd(post, "death-save", 200, "Alice", aria("advantage", true)),
		dnd(post, "death-save", 403, "Bob", aria()),
		// Rests.
		dnd(post, "short-rest", 200, "Bob", brom("autoHD", true, "autoHDThreshold", 0.9), times...),
		dnd(post, "short-rest", 403, "Alice", brom()),
		dnd(post, "short-rest", 400, "Bob", brom("autoHD", true, "autoHDThreshold", -1)),
		dnd(post, "long-rest", 200, "", aria(), times...),
		dnd(post, "long-rest", 403, "Bob", aria()),
		// Experience and coins: the module lets experience go negative,
		// changes coins without a permission check and clamps them at 0.
		dnd(post, "modify-experience", 200, "Alice", aria("amount", -500)),
		dnd(post, "modify-experience", 403, "Alice", brom("amount", 5)),
		dnd(post, "modify-experience", 400, "", aria("amount", -7000)),
		dnd(post, "modify-experience", 403, "Tess", aria("amount", -7000)),
		dnd(post, "modify-experience", 400, "", aria()),
		dnd(post, "modify-currency", 200, "Alice", aria("currency", "gp", "amount", -5)),
		dnd(post, "modify-currency", 400, "Alice", aria("currency", "gp", "amount", -100)),
		dnd(post, "modify-currency", 403, "Bob", aria("currency", "gp", "amount", 5)),
		dnd(post, "modify-currency", 403, "Tess", aria("currency", "gp", "amount", 5)),
		dnd(post, "modify-currency", 400, "", aria("currency", "xp", "amount", 5)),
		dnd(post, "modify-currency", 404, "", map[string]any{"actorUuid": "Actor.missing000000001", "currency": "gp", "amount": 1}),
		dnd(post, "transfer-currency", 403, "Alice", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorUuid": relaytest.BromUUID, "currency": map[string]any{"gp": 1}}),
		dnd(post, "transfer-currency", 400, "", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorName": "Brom Ironfist", "currency": map[string]any{"gp": 81, "sp": 1}}),
		dnd(post, "transfer-currency", 400, "", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorUuid": relaytest.BromUUID, "currency": map[string]any{"gp": -1}}),
		dnd(post, "transfer-currency", 400, "", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorUuid": relaytest.AriaUUID, "currency": map[string]any{"gp": 1}}),
		dnd(post, "transfer-currency", 200, "Gamemaster", map[string]any{"sourceActorUuid": relaytest.AriaUUID, "targetActorName": "Brom Ironfist", "currency": map[string]any{"gp": 30, "cp": 5}}),
		// Items and spells.
		dnd(post, "modify-item-charges", 200, "Alice", aria("itemName", "Wand of Magic Missiles", "amount", -1)),
		dnd(post, "modify-item-charges", 403, "Bob", aria("itemUuid", relaytest.WandUUID, "amount", 1)),
		dnd(post, "modify-item-charges", 400, "Alice", aria("itemName", "Wand of Magic Missiles")),
		dnd(post, "equip-item", 200, "Alice", aria("itemName", "Ring of Protection", "equipped", true)),
		dnd(post, "equip-item", 403, "Alice", brom("itemName", "Shield", "equipped", false)),
		dnd(post, "equip-item", 400, "Alice", aria("itemName", "Ring of Protection")),
		dnd(post, "equip-item", 404, "Alice", aria("itemName", "Vorpal Sword", "equipped", true)),
		dnd(post, "attune-item", 200, "Alice", map[string]any{"actorName": "aria vale", "itemName": "Ring of Protection", "attuned": true}),
		dnd(post, "attune-item", 400, "Alice", aria("itemUuid", relaytest.WandUUID, "attuned", true)),
		// The module equips and attunes anything, with no attunement
		// limit, and changes the charges of an item without any (to 0):
		// the relay applies the embedded world's rules first.
		dnd(post, "equip-item", 400, "Alice", aria("itemName", "Fire Bolt", "equipped", true)),
		dnd(post, "equip-item", 400, "Alice", aria("itemUuid", relaytest.BromUUID+".Item.secondWind000001", "equipped", true)),
		dnd(post, "equip-item", 403, "Tess", aria("itemName", "Ring of Protection", "equipped", false)),
		dnd(post, "modify-item-charges", 400, "Alice", aria("itemName", "Ring of Protection", "amount", -1)),
		dnd(post, "attune-item", 200, "Alice", aria("itemName", "Ring of Protection", "attuned", false)),
		{name: "allow Aria no attunement", status: 200, method: http.MethodPut, path: "/update", query: relaytest.Q("uuid", relaytest.AriaUUID),
			body: map[string]any{"data": map[string]any{"system.attributes.attunement.max": 0}}, ignore: times},
		dnd(post, "attune-item", 400, "Alice", aria("itemName", "Ring of Protection", "attuned", true)),
		dnd(post, "prepare-spell", 200, "Alice", aria("spellName", "Detect Magic", "prepared", true)),
		dnd(post, "prepare-spell", 400, "Alice", aria("spellName", "Fire Bolt", "prepared", false)),
		dnd(post, "prepare-spell", 403, "Bob", aria("spellName", "Fireball", "prepared", false)),
		dnd(post, "prepare-spell", 403, "Tess", aria("spellName", "Fireball", "prepared", false)),
		dnd(post, "prepare-spell", 404, "", aria("spellName", "Wish", "prepared", true)),
		// The selection: an actor found through it is one the user can
		// see (the module would take any).
		{name: "select Aria's token", status: 200, method: http.MethodPost, path: "/select", body: map[string]any{"uuids": []string{ariaTokenUUID}, "overwrite": true}},
		dnd(post, "modify-experience", 200, "Alice", map[string]any{"selected": true, "amount": 100}),
		dnd(post, "modify-experience", 403, "Bob", map[string]any{"selected": true, "amount": 100}),
		dnd(post, "short-rest", 400, "Tess", map[string]any{"selected": true}),
		dnd(get, "concentration", 200, "Alice", map[string]any{"selected": true}),
		dnd(post, "equip-item", 400, "Tess", map[string]any{"selected": true, "itemName": "Ring of Protection", "equipped": true}),
		// Uses, concentration.
		{name: "heal Aria", status: 200, method: http.MethodPut, path: "/update", query: relaytest.Q("uuid", relaytest.AriaUUID),
			body: map[string]any{"data": map[string]any{"system.attributes.hp.value": 20}}, ignore: []string{"_stats"}},
		dnd(post, "break-concentration", 400, "Alice", aria()),
		dnd(post, "use-spell", 200, "Alice", aria("abilityName", "Hold Person", "targetName", "Brom Ironfist"), notCarried...),
		dnd(get, "concentration", 200, "Alice", aria(), effectIDs...),
		dnd(get, "concentration", 200, "", map[string]any{"actorName": "aria vale"}, effectIDs...),
		dnd(get, "concentration", 403, "Bob", aria()),
		dnd(get, "concentration", 403, "Tess", aria()),
		// By name, an actor the user cannot see is not found, as one that
		// does not exist (the module would find it).
		dnd(get, "concentration", 404, "Tess", map[string]any{"actorName": "aria vale"}),
		dnd(post, "break-concentration", 404, "Tess", map[string]any{"actorName": "Aria Vale"}),
		dnd(post, "equip-item", 404, "Tess", map[string]any{"actorName": "Aria Vale", "itemName": "Ring of Protection", "equipped": true}),
		dnd(post, "transfer-currency", 404, "Tess", map[string]any{"sourceActorName": "Aria Vale", "targetActorUuid": relaytest.BromUUID, "currency": map[string]any{"gp": 1}}),
		dnd(get, "concentration", 200, "Bob", map[string]any{"actorName": "brom ironfist"}),
		dnd(post, "concentration-save", 403, "Bob", aria("damage", 12)),
		// The module rolls a plain Constitution save (reference §9.7): the
		// relay adds the actor's concentration bonus.
		{name: "give Aria a concentration bonus", status: 200, method: http.MethodPut, path: "/update", query: relaytest.Q("uuid", relaytest.AriaUUID),
			body: map[string]any{"data": map[string]any{"system.attributes.concentration.bonuses.save": "2"}},
			// The concentration effect's id and start each world made up.
			ignore: []string{"_stats", "_id", "startTime"}},
		dnd(post, "concentration-save", 200, "Alice", aria("damage", 12, "bonus", "1")),
		dnd(post, "concentration-save", 400, "Alice", aria()),
		dnd(post, "concentration-save", 400, "Alice", aria("damage", -5)),
		dnd(post, "use-item", 200, "", brom("abilityName", "Longsword", "targetName", "Goblin"), notCarried...),
		dnd(post, "use-item", 200, "Bob", brom("abilityName", "Longsword"), notCarried...),
		dnd(post, "use-feature", 200, "Bob", brom("abilityName", "Second Wind"), notCarried...),
		dnd(post, "use-feature", 400, "Bob", brom("abilityName", "Second Wind")),
		dnd(post, "use-ability", 200, "Alice", aria("abilityUuid", relaytest.AriaUUID+".Item.magicMissile0001"), notCarried...),
		dnd(post, "use-spell", 403, "Bob", aria("abilityName", "Fire Bolt")),
		dnd(post, "use-spell", 400, "Alice", aria()),
		dnd(post, "use-spell", 404, "Alice", aria("abilityName", "Wish")),
		dnd(post, "use-item", 400, "Alice", aria("abilityUuid", relaytest.BromUUID+".Item.secondWind000001")),
		dnd(post, "use-spell", 400, "Alice", aria("abilityUuid", relaytest.AriaUUID+".Item.ariaQuarterstaff")),
		dnd(post, "use-spell", 403, "Tess", aria("abilityName", "Fire Bolt")),
		dnd(post, "break-concentration", 0, "Alice", aria(), effectIDs...),
	}
	compareCalls(t, tr, linked, calls)
}

// compareCalls makes each call on the embedded demo world and then on the
// linked world, and requires the same status and body, the ignored keys
// aside. A call's status, when not 0, is what the embedded world must
// answer.
func compareCalls(t *testing.T, tr *testRelay, linked string, calls []comparison) {
	t.Helper()
	for _, c := range calls {
		var answers [2]any
		var statuses [2]int
		for i, clientID := range []string{demo.ClientID, linked} {
			query := url.Values{}
			for k, v := range c.query {
				query[k] = v
			}
			query.Set("clientId", clientID)
			var body any // a nil map would be sent as a JSON null
			if c.body != nil {
				body = c.body
			}
			r := tr.Do(c.method, c.path, tr.AdminKey, query, body)
			statuses[i] = r.Status
			var v any
			if err := json.Unmarshal(r.Body, &v); err != nil {
				t.Fatalf("%s: %s", c.name, r.Body)
			}
			answers[i] = normalise(v, append(c.ignore, "requestId"))
		}
		e, _ := json.Marshal(answers[0])
		if c.status != 0 && statuses[0] != c.status {
			t.Errorf("%s: embedded %d, want %d: %s", c.name, statuses[0], c.status, e)
		}
		if statuses[0] != statuses[1] || !reflect.DeepEqual(answers[0], answers[1]) {
			l, _ := json.Marshal(answers[1])
			t.Errorf("%s: embedded %d %s\n linked %d %s", c.name, statuses[0], e, statuses[1], l)
		}
	}
}

// TestLinkedDnd5eOverGRPC: gRPC callers get the same codes from a linked
// world as from an embedded one, including the refusals of the relay's own
// checks and the module's texts for a state that does not allow the
// operation (FAILED_PRECONDITION, not INVALID_ARGUMENT).
func TestLinkedDnd5eOverGRPC(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	linked := linkDemoCopy(t, tr.Node)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	client := relayv1.NewDnd5EServiceClient(tr.Conn)
	amount := func(n int32) *int32 { return &n }
	yes := true
	for _, c := range []struct {
		name string
		call func(clientID string) (any, error)
		code codes.Code
	}{
		{"insufficient coins", func(id string) (any, error) {
			return client.ModifyCurrency(ctx, &relayv1.ModifyCurrencyRequest{ClientId: id, ActorUuid: relaytest.AriaUUID, Currency: "gp", Amount: amount(-1000)})
		}, codes.FailedPrecondition},
		{"coins of another's actor", func(id string) (any, error) {
			return client.ModifyCurrency(ctx, &relayv1.ModifyCurrencyRequest{ClientId: id, UserId: "Bob", ActorUuid: relaytest.AriaUUID, Currency: "gp", Amount: amount(1)})
		}, codes.PermissionDenied},
		{"no death save above 0 hit points", func(id string) (any, error) {
			return client.DeathSave(ctx, &relayv1.DeathSaveRequest{ClientId: id, ActorUuid: relaytest.AriaUUID})
		}, codes.FailedPrecondition},
		{"a wand needs no attunement", func(id string) (any, error) {
			return client.AttuneItem(ctx, &relayv1.AttuneItemRequest{ClientId: id, ActorUuid: relaytest.AriaUUID, ItemUuid: relaytest.WandUUID, Attuned: &yes})
		}, codes.FailedPrecondition},
		{"skill check", func(id string) (any, error) {
			return client.SkillCheck(ctx, &relayv1.SkillCheckRequest{ClientId: id, ActorUuid: relaytest.BromUUID, Skill: "ath"})
		}, codes.OK},
	} {
		var errs [2]error
		for i, id := range []string{demo.ClientID, linked} {
			_, errs[i] = c.call(id)
		}
		if status.Code(errs[0]) != c.code || status.Code(errs[1]) != c.code || status.Convert(errs[0]).Message() != status.Convert(errs[1]).Message() {
			t.Errorf("%s: embedded %v, linked %v, want %v", c.name, errs[0], errs[1], c.code)
		}
	}
}

// TestLinkedDnd5eOnlyInDnd5eWorlds: a linked world of another system does
// not offer the fifth-edition operations (the module registers them only
// in dnd5e worlds): 501 naming the operation, on REST and gRPC, with no
// request sent to the tabletop.
func TestLinkedDnd5eOnlyInDnd5eWorlds(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	ctx := context.Background()
	host, err := world.OpenHost(t.TempDir(), world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		t.Fatal(err)
	}
	w, err := embedded.NewRegistry(host, embedded.Options{}).World(ctx, demo.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	players, err := linktest.Players(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	code, _, err := tr.Links().CreatePairingCode(ctx, "", "test")
	if err != nil {
		t.Fatal(err)
	}
	tt := linktest.New(linktest.Config{RelayURL: tr.Base, WorldID: "pf", WorldTitle: "Other system", FoundryVersion: "13.345",
		SystemID: "pf2e", SystemVersion: "6.0.0", ServerFingerprint: "fp-pf", Players: players, Handler: linktest.WorldHandler(w)})
	if _, err := tt.Pair(ctx, code); err != nil {
		t.Fatal(err)
	}
	if err := tt.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tt.Drop)
	clientID, _ := tt.Credentials()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, _ := tr.Links().Hub().Info(clientID); len(info.Players) == len(players) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the player list")
		}
	}
	sent := len(tt.Received())
	r := tr.Do(http.MethodPost, "/dnd5e/skill-check", tr.AdminKey, relaytest.Q("clientId", clientID), map[string]any{"actorUuid": relaytest.BromUUID, "skill": "ath"})
	if want := "World '" + clientID + "' does not offer dnd5e/skill-check"; r.Status != http.StatusNotImplemented || r.ErrorText(t) != want {
		t.Fatalf("skill-check: %d %s, want 501 %q", r.Status, r.Body, want)
	}
	r = tr.Do(http.MethodGet, "/dnd5e/concentration", tr.AdminKey, relaytest.Q("clientId", clientID, "actorUuid", relaytest.AriaUUID), nil)
	if r.Status != http.StatusNotImplemented || !strings.Contains(r.ErrorText(t), "dnd5e/concentration") {
		t.Fatalf("concentration: %d %s", r.Status, r.Body)
	}
	gctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", tr.AdminKey)
	_, err = relayv1.NewDnd5EServiceClient(tr.Conn).LongRest(gctx, &relayv1.LongRestRequest{ClientId: clientID, ActorUuid: relaytest.AriaUUID})
	if status.Code(err) != codes.Unimplemented || !strings.Contains(status.Convert(err).Message(), "dnd5e/long-rest") {
		t.Fatalf("gRPC long rest: %v", err)
	}
	// The other operations still reach the tabletop.
	if r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("clientId", clientID, "uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
		t.Fatalf("get: %d %s", r.Status, r.Body)
	}
	for _, m := range tt.Received()[sent:] {
		if strings.Contains(string(m), "skill-check") || strings.Contains(string(m), "concentration") || strings.Contains(string(m), "long-rest") {
			t.Fatalf("a dnd5e request reached the tabletop: %s", m)
		}
	}
}

// BenchmarkLinkedSkillCheck measures POST /dnd5e/skill-check as a player
// (without a chat card) on the embedded demo world and on a copy of it
// linked through the simulator, one request at a time: the linked call
// makes two round trips to the tabletop (the relay's read of the actor
// for its OBSERVER check, then the roll).
func BenchmarkLinkedSkillCheck(b *testing.B) {
	r, key := benchRelay(b)
	linked := linkDemoCopy(b, r)
	c := benchClient()
	body := []byte(`{"actorUuid":"` + relaytest.AriaUUID + `","skill":"arc","userId":"Alice","createChatMessage":false}`)
	for _, w := range []struct{ name, clientID string }{{"embedded", demo.ClientID}, {"linked", linked}} {
		b.Run(w.name, func(b *testing.B) {
			req, _ := http.NewRequest(http.MethodPost, "http://"+r.Addr()+"/dnd5e/skill-check?clientId="+w.clientID, nil)
			req.Header.Set("x-api-key", key)
			req.Header.Set("Content-Type", "application/json")
			for b.Loop() {
				doBench(b, c, req, body)
			}
		})
	}
}
