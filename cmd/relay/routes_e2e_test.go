package main

import (
	"bufio"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"

	"github.com/tabletop-relay/relay/server"
)

// routeRPC is one REST route and the RPC it must reach.
type routeRPC struct {
	method, path string
	rpc          string // relay.v1.<Service>/<Method>
	// spec marks the routes the specification (spec/relay-api.md) names;
	// the others are the relay's own (keys, worlds, tickets, links, and
	// the established document and combat operations).
	spec bool
}

// specRoutes is the specification's path list, with the relay's other
// routes, each with the RPC it must reach.
var specRoutes = []routeRPC{
	// Endpoints named in the permission rules.
	{"GET", "/get", "DocumentService/GetDocument", true},
	{"PUT", "/update", "DocumentService/UpdateDocument", true},
	{"POST", "/execute-js", "ScriptService/ExecuteJs", true},
	{"POST", "/select", "CanvasService/SelectTokens", true},
	{"GET", "/selected", "CanvasService/GetSelectedTokens", true},
	{"POST", "/start-encounter", "CombatService/StartEncounter", true},
	{"POST", "/end-encounter", "CombatService/EndEncounter", true},
	{"POST", "/next-turn", "CombatService/NextTurn", true},
	{"POST", "/next-round", "CombatService/NextRound", true},
	{"POST", "/create-folder", "FolderService/CreateFolder", true},
	{"DELETE", "/delete-folder", "FolderService/DeleteFolder", true},
	{"GET", "/file-system", "FileService/ListFiles", true},
	{"GET", "/download", "FileService/DownloadFile", true},
	{"POST", "/upload", "FileService/UploadFile", true},
	// "Also named as existing": search, structure, delete, create, give,
	// remove, kill; and the other combat navigation operations.
	{"GET", "/search", "DocumentService/SearchDocuments", false},
	{"GET", "/structure", "DocumentService/GetStructure", false},
	{"DELETE", "/delete", "DocumentService/DeleteDocument", false},
	{"POST", "/create", "DocumentService/CreateDocument", false},
	{"POST", "/give", "DocumentService/GiveItem", false},
	{"POST", "/remove", "DocumentService/RemoveItem", false},
	{"POST", "/kill", "DocumentService/Kill", false},
	{"POST", "/previous-turn", "CombatService/PreviousTurn", false},
	{"POST", "/previous-round", "CombatService/PreviousRound", false},
	{"POST", "/last-turn", "CombatService/PreviousTurn", false},
	{"POST", "/last-round", "CombatService/PreviousRound", false},
	// Ruleset endpoints.
	{"GET", "/dnd5e/get-actor-details", "Dnd5EService/GetActorDetails", true},
	{"POST", "/dnd5e/modify-item-charges", "Dnd5EService/ModifyItemCharges", true},
	{"POST", "/dnd5e/short-rest", "Dnd5EService/ShortRest", true},
	{"POST", "/dnd5e/long-rest", "Dnd5EService/LongRest", true},
	{"POST", "/dnd5e/skill-check", "Dnd5EService/SkillCheck", true},
	{"POST", "/dnd5e/ability-save", "Dnd5EService/AbilitySave", true},
	{"POST", "/dnd5e/ability-check", "Dnd5EService/AbilityCheck", true},
	{"POST", "/dnd5e/death-save", "Dnd5EService/DeathSave", true},
	{"POST", "/dnd5e/modify-experience", "Dnd5EService/ModifyExperience", true},
	{"GET", "/dnd5e/concentration", "Dnd5EService/GetConcentration", true},
	{"POST", "/dnd5e/break-concentration", "Dnd5EService/BreakConcentration", true},
	{"POST", "/dnd5e/concentration-save", "Dnd5EService/ConcentrationSave", true},
	{"POST", "/dnd5e/equip-item", "Dnd5EService/EquipItem", true},
	{"POST", "/dnd5e/attune-item", "Dnd5EService/AttuneItem", true},
	{"POST", "/dnd5e/transfer-currency", "Dnd5EService/TransferCurrency", true},
	{"POST", "/dnd5e/modify-currency", "Dnd5EService/ModifyCurrency", true},
	{"POST", "/dnd5e/prepare-spell", "Dnd5EService/PrepareSpell", true},
	{"POST", "/dnd5e/use-ability", "Dnd5EService/UseAbility", true},
	{"POST", "/dnd5e/use-feature", "Dnd5EService/UseFeature", true},
	{"POST", "/dnd5e/use-spell", "Dnd5EService/UseSpell", true},
	{"POST", "/dnd5e/use-item", "Dnd5EService/UseItem", true},
	// Event streams.
	{"GET", "/hooks/subscribe", "EventService/SubscribeHooks", true},
	{"GET", "/encounters/subscribe", "EventService/SubscribeEncounters", true},
	{"GET", "/actor/subscribe", "EventService/SubscribeActors", true},
	{"GET", "/scene/subscribe", "EventService/SubscribeScenes", true},
	// The relay's own.
	{"POST", "/increase", "DocumentService/IncreaseAttribute", false},
	{"POST", "/decrease", "DocumentService/DecreaseAttribute", false},
	{"GET", "/encounters", "CombatService/ListEncounters", false},
	{"POST", "/add-to-encounter", "CombatService/AddToEncounter", false},
	{"POST", "/remove-from-encounter", "CombatService/RemoveFromEncounter", false},
	{"POST", "/keys", "KeyService/CreateKey", false},
	{"GET", "/keys", "KeyService/ListKeys", false},
	{"DELETE", "/keys/{id}", "KeyService/RevokeKey", false},
	{"GET", "/clients", "ClientService/ListClients", false},
	{"POST", "/stream-tickets", "TicketService/CreateStreamTicket", false},
	{"POST", "/pairing-codes", "LinkService/CreatePairingCode", false},
	{"DELETE", "/linked-worlds/{client_id}", "LinkService/UnpairWorld", false},
	{"POST", "/accounts", "AccountService/CreateAccount", false},
	{"GET", "/accounts", "AccountService/ListAccounts", false},
	{"GET", "/accounts/{id}", "AccountService/GetAccount", false},
	{"PATCH", "/accounts/{id}", "AccountService/UpdateAccount", false},
	{"POST", "/accounts/{id}/suspend", "AccountService/SuspendAccount", false},
	{"POST", "/accounts/{id}/resume", "AccountService/ResumeAccount", false},
	{"DELETE", "/accounts/{id}", "AccountService/DeleteAccount", false},
	{"POST", "/worlds", "WorldService/CreateWorld", false},
	{"DELETE", "/worlds/{client_id}", "WorldService/DeleteWorld", false},
	{"POST", "/account/password", "SigninService/ChangePassword", false},
	{"POST", "/invites", "SigninService/CreateInvite", false},
	{"GET", "/invites", "SigninService/ListInvites", false},
	{"DELETE", "/invites/{id}", "SigninService/RevokeInvite", false},
	{"GET", "/audit", "AuditService/ListAuditRecords", false},
}

// TestRoutesReachTheirRPC walks the specification's path list (and the
// relay's other routes): the list is exactly the contract's HTTP rules,
// each rule binds the RPC the list names, and on a running relay each
// path and method reaches exactly that RPC. The RPC that ran shows in the
// answer twice: its operation in the envelope's type (as grpc-gateway's
// mux chose it) and in the request id the server's interceptors issued.
// Every request is sent with an admin key and no parameters, so that it
// reaches the server and fails there, changing nothing that matters. The
// gateway's own route table, which admits each request for its RPC, shows
// its choice in the 414 it answers, before any RPC, to a query string over
// the limit: the two must agree.
func TestRoutesReachTheirRPC(t *testing.T) {
	t.Parallel()
	want := map[string]string{}
	for _, r := range specRoutes {
		key := r.method + " " + r.path
		if _, dup := want[key]; dup {
			t.Fatalf("%s listed twice", key)
		}
		want[key] = "/relay.v1." + r.rpc
	}
	services, err := server.ServiceDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	operations := map[string]string{}
	got := map[string]string{}
	for _, sd := range services {
		for i := range sd.Methods().Len() {
			md := sd.Methods().Get(i)
			full := "/" + string(sd.FullName()) + "/" + string(md.Name())
			operations[full] = server.MethodPolicy(md).GetOperation()
			rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				method, path := httpRule(r)
				if method != "" {
					got[method+" "+path] = full
				}
			}
		}
	}
	for key, rpc := range want {
		if got[key] != rpc {
			t.Errorf("%s binds %q in the contract, want %s", key, got[key], rpc)
		}
	}
	for key, rpc := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("the contract binds %s to %s, which the list lacks", key, rpc)
		}
	}
	checkSpecPathList(t)

	tr := startTestRelay(t)
	for _, r := range specRoutes {
		path := strings.NewReplacer("{id}", "k_unknown", "{client_id}", "nowhere").Replace(r.path)
		query := url.Values{}
		var body any
		switch {
		case strings.HasSuffix(r.path, "/subscribe"):
			query.Set("lastEventId", "not-a-number") // a 400 instead of a stream
		case r.method != http.MethodGet:
			body = map[string]any{}
		}
		resp := tr.Do(r.method, path, tr.AdminKey, query, body)
		op := operations[want[r.method+" "+r.path]]
		if id := resp.Header.Get("X-Request-Id"); !strings.HasPrefix(id, op+"_") {
			t.Errorf("%s %s: request id %q, want the server's id of %s (%d %.200s)", r.method, path, id, op, resp.Status, resp.Body)
		}
		if typ, _ := resp.JSON(t)["type"].(string); typ != op+"-result" {
			t.Errorf("%s %s: type %q, want %s-result (%d %.200s)", r.method, path, typ, op, resp.Status, resp.Body)
		}
		long := tr.Do(r.method, path, tr.AdminKey, url.Values{"x": {strings.Repeat("a", 17<<10)}}, nil)
		if typ, _ := long.JSON(t)["type"].(string); long.Status != http.StatusRequestURITooLong || typ != op+"-result" ||
			!strings.HasPrefix(long.Header.Get("X-Request-Id"), op+"_") {
			t.Errorf("%s %s with a long query: %d %s, want 414 as %s", r.method, path, long.Status, long.Body, op)
		}
	}
}

// httpRule is the method and path of a rule.
func httpRule(r *annotations.HttpRule) (string, string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch
	}
	return "", ""
}

// specPath finds the specification: RELAY_SPEC, else spec/relay-api.md in
// the shared folder beside the repository (as CI lays it out).
func specPath() string {
	if p := os.Getenv("RELAY_SPEC"); p != "" {
		return p
	}
	return filepath.Join("..", "..", "..", "shared", "spec", "relay-api.md")
}

// checkSpecPathList reads the specification's own text, when it is at
// hand, and checks that every method and path it names is in specRoutes,
// marked as the specification's, and that every route so marked is named
// there.
func checkSpecPathList(t *testing.T) {
	t.Helper()
	f, err := os.Open(specPath())
	if err != nil {
		t.Logf("specification not found (%v); set RELAY_SPEC to check the list against its text", err)
		return
	}
	defer f.Close()
	token := regexp.MustCompile("\\b(GET|POST|PUT|DELETE)\\b|`(/[^`]*)`")
	named := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		method := ""
		for _, m := range token.FindAllStringSubmatch(sc.Text(), -1) {
			switch {
			case m[1] != "":
				method = m[1]
			case method != "":
				named[method+" "+m[2]] = true
			}
		}
	}
	if len(named) < 35 {
		t.Fatalf("only %d paths read from %s", len(named), specPath())
	}
	var listed []string
	for _, r := range specRoutes {
		key := r.method + " " + r.path
		if r.spec {
			listed = append(listed, key)
			if !named[key] {
				t.Errorf("%s is marked as the specification's but it does not name it", key)
			}
		}
	}
	for key := range named {
		if !slices.Contains(listed, key) {
			t.Errorf("the specification names %s, which the list lacks (or does not mark as the specification's)", key)
		}
	}
	t.Logf("%d paths of the specification checked", len(named))
}
