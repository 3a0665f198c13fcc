package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/gen/openapi"
)

var requestIDPattern = regexp.MustCompile(`^[a-z0-9-]+_\d+$`)

func TestFirstStartCreatesAdminKeyOnce(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	if tr.adminKey == "" {
		t.Fatal("first start printed no admin key")
	}
	info, err := os.Stat(filepath.Join(tr.dataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode = %v, want 0600", info.Mode().Perm())
	}
	data, _ := os.ReadFile(filepath.Join(tr.dataDir, "admin.key"))
	if strings.TrimSpace(string(data)) != tr.adminKey {
		t.Fatal("admin.key does not hold the printed key")
	}
	if _, err := os.Stat(filepath.Join(tr.dataDir, "worlds", "demo", "world.db")); err != nil {
		t.Fatalf("demo world not created: %v", err)
	}
	// A second start on the same data prints nothing and keeps the world.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.close(ctx); err != nil {
		t.Fatal(err)
	}
	again := startTestRelay(t, func(c *serveConfig) { c.dataDir = tr.dataDir })
	if again.adminKey != "" {
		t.Fatal("second start created another admin key")
	}
	resp := again.do(http.MethodGet, "/get", tr.adminKey, q("uuid", ariaUUID), nil)
	if resp.status != http.StatusOK {
		t.Fatalf("after restart: %d %s", resp.status, resp.body)
	}
}

func TestHealthOpenAPIAndReflection(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	resp := tr.do(http.MethodGet, "/healthz", "", nil, nil)
	want := buildInfo()
	if resp.status != http.StatusOK || string(resp.body) != fmt.Sprintf(`{"status":"SERVING","version":%q,"commit":%q,"date":%q}`, want.Version, want.Commit, want.Date) {
		t.Fatalf("healthz: %d %s", resp.status, resp.body)
	}
	resp = tr.do(http.MethodGet, "/openapi.json", "", nil, nil)
	if resp.status != http.StatusOK {
		t.Fatalf("openapi: %d", resp.status)
	}
	paths, _ := resp.json(t)["paths"].(map[string]any)
	for _, p := range []string{"/get", "/update", "/dnd5e/short-rest", "/hooks/subscribe", "/keys"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
	// The served document is the generated OpenAPI 3 one; what it says is
	// checked against the relay's answers by TestOpenAPIDescribesAnswers.
	if !bytes.Equal(resp.body, openapi.JSON) || resp.json(t)["openapi"] != "3.0.3" {
		t.Errorf("/openapi.json is not gen/openapi/relay.json")
	}
	// gRPC over h2c on the same port: the standard health service.
	conn, err := grpc.NewClient(tr.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over h2c: %v %v", hc, err)
	}
	// And an authenticated relay call over the same h2c connection.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	got, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: ariaUUID})
	if err != nil {
		t.Fatalf("GetDocument over h2c: %v", err)
	}
	if doc := decodeDoc(t, valueJSON(t, got.GetDocument())); doc["name"] != "Aria Vale" {
		t.Fatalf("GetDocument over h2c: %v", doc)
	}
}

func TestEnvelopeAndRequestIDs(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	resp := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", guardUUID, "userId", "Alice"), nil)
	if resp.status != http.StatusOK {
		t.Fatalf("status %d: %s", resp.status, resp.body)
	}
	body := resp.json(t)
	rid, _ := body["requestId"].(string)
	if !regexp.MustCompile(`^entity_\d+$`).MatchString(rid) {
		t.Fatalf("requestId %q", rid)
	}
	if resp.header.Get("X-Request-Id") != rid {
		t.Fatalf("X-Request-Id %q, body %q", resp.header.Get("X-Request-Id"), rid)
	}
	want := fmt.Sprintf(`{"type":"entity-result","requestId":%q,"data":{"img":%s,"name":"Town Guard","type":"Actor","uuid":%q}}`,
		rid, mustJSON(t, resp.data(t)["img"]), guardUUID)
	if string(resp.body) != want {
		t.Fatalf("LIMITED body:\n got %s\nwant %s", resp.body, want)
	}

	// Errors carry the same envelope fields.
	resp = tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", goblinUUID, "userId", "Alice"), nil)
	rid = resp.header.Get("X-Request-Id")
	want = fmt.Sprintf(`{"type":"entity-result","requestId":%q,"error":"User 'Alice' does not have permission to view this entity"}`, rid)
	if resp.status != http.StatusForbidden || string(resp.body) != want {
		t.Fatalf("NONE read: %d\n got %s\nwant %s", resp.status, resp.body, want)
	}

	// Request ids stay unique under concurrency.
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				r := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", ariaUUID), nil)
				id := r.header.Get("X-Request-Id")
				mu.Lock()
				if seen[id] || !requestIDPattern.MatchString(id) {
					t.Errorf("bad or duplicate request id %q", id)
				}
				seen[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// decodeDoc decodes a raw JSON document from a gRPC response.
func decodeDoc(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("document is not a JSON object: %v", err)
	}
	return doc
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPermissionTable checks reads and writes on documents of each level for
// a player, a GM and no user.
func TestPermissionTable(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	type row struct {
		level     string
		uuid      string
		userID    string
		readCode  int
		limited   bool
		writeCode int
	}
	rows := []row{
		{"NONE", goblinUUID, "Alice", 403, false, 403},
		{"LIMITED", guardUUID, "Alice", 200, true, 403},
		{"OBSERVER", maraUUID, "Alice", 200, false, 403},
		{"OWNER", ariaUUID, "Alice", 200, false, 200},
		{"NONE as GM", goblinUUID, "Gamemaster", 200, false, 200},
		{"LIMITED as GM", guardUUID, "Gamemaster", 200, false, 200},
		{"OBSERVER as GM", maraUUID, "Gamemaster", 200, false, 200},
		{"OWNER as GM", ariaUUID, "Gamemaster", 200, false, 200},
		{"NONE without user", goblinUUID, "", 200, false, 200},
		{"LIMITED without user", guardUUID, "", 200, false, 200},
		{"OBSERVER without user", maraUUID, "", 200, false, 200},
		{"OWNER without user", ariaUUID, "", 200, false, 200},
	}
	for _, r := range rows {
		t.Run(r.level, func(t *testing.T) {
			query := q("uuid", r.uuid)
			if r.userID != "" {
				query.Set("userId", r.userID)
			}
			resp := tr.do(http.MethodGet, "/get", tr.adminKey, query, nil)
			if resp.status != r.readCode {
				t.Fatalf("read: %d %s", resp.status, resp.body)
			}
			if r.readCode == 200 {
				data := resp.data(t)
				if r.limited {
					if len(data) != 4 || data["name"] == nil || data["uuid"] != r.uuid || data["type"] != "Actor" {
						t.Fatalf("LIMITED data %v", data)
					}
				} else if data["system"] == nil || data["ownership"] == nil {
					t.Fatalf("full data lacks fields: %v", data)
				}
			}
			before := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", r.uuid), nil).data(t)["name"]
			resp = tr.do(http.MethodPut, "/update", tr.adminKey, query, map[string]any{"data": map[string]any{"system.details.biography.value": "changed by " + r.level}})
			if resp.status != r.writeCode {
				t.Fatalf("write: %d %s", resp.status, resp.body)
			}
			if r.writeCode == 403 {
				// The refusal names the document only for a user
				// who may see its name.
				name, _ := before.(string)
				if r.readCode != 200 {
					name = r.uuid
				}
				wantMsg := fmt.Sprintf("User '%s' does not have permission to update '%s'", r.userID, name)
				if resp.errorText(t) != wantMsg {
					t.Fatalf("write error %q, want %q", resp.errorText(t), wantMsg)
				}
				after := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", r.uuid), nil).data(t)
				if bio, _ := after["system"].(map[string]any)["details"].(map[string]any)["biography"].(map[string]any); bio != nil && bio["value"] == "changed by "+r.level {
					t.Fatal("refused write changed the document")
				}
			}
		})
	}
}

// TestErrorStatuses covers every error row of the contract.
func TestErrorStatuses(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	readOnly, _ := tr.newKey(&relayv1.CreateKeyRequest{Name: "ro", Scopes: []string{"entity:read"}})
	otherWorld, _ := tr.newKey(&relayv1.CreateKeyRequest{Name: "elsewhere", Scopes: []string{"all"}, ClientIds: []string{"elsewhere"}})
	revoked, revokedID := tr.newKey(&relayv1.CreateKeyRequest{Name: "gone", Scopes: []string{"all"}})
	expiring, _ := tr.newKey(&relayv1.CreateKeyRequest{Name: "soon", Scopes: []string{"all"}, ExpiresAt: time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339)})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	if _, err := relayv1.NewKeyServiceClient(tr.conn).RevokeKey(ctx, &relayv1.RevokeKeyRequest{Id: revokedID}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let the expiring key expire (RFC 3339 has whole seconds)

	admin := tr.adminKey
	big := `{"data":{"name":"` + strings.Repeat("x", 70<<10) + `"}}`
	tests := []struct {
		name, method, path, key string
		query                   map[string]string
		body                    any
		status                  int
		msg                     string
	}{
		{"missing key", "GET", "/get", "", map[string]string{"uuid": ariaUUID}, nil, 401, "API key is required"},
		{"unknown key", "GET", "/get", "rk_nope", map[string]string{"uuid": ariaUUID}, nil, 401, "Invalid API key"},
		{"revoked key", "GET", "/get", revoked, map[string]string{"uuid": ariaUUID}, nil, 401, "API key has been revoked"},
		{"expired key", "GET", "/get", expiring, map[string]string{"uuid": ariaUUID}, nil, 401, "API key has expired"},
		{"missing scope", "PUT", "/update", readOnly, map[string]string{"uuid": ariaUUID}, map[string]any{"data": map[string]any{"name": "x"}}, 403, "API key lacks required scope: entity:write"},
		{"key bound to another world", "GET", "/get", otherWorld, map[string]string{"uuid": ariaUUID, "clientId": "demo"}, nil, 403, "API key is not authorized for client 'demo'"},
		{"unknown world", "GET", "/get", admin, map[string]string{"uuid": ariaUUID, "clientId": "nowhere"}, nil, 404, "Unknown world: nowhere"},
		{"unknown document", "GET", "/get", admin, map[string]string{"uuid": "Actor.doesNotExist0001"}, nil, 404, "Entity not found: Actor.doesNotExist0001"},
		{"missing parameter", "GET", "/get", admin, nil, nil, 400, "'uuid' is required"},
		{"user not found", "GET", "/get", admin, map[string]string{"uuid": ariaUUID, "userId": "Mallory"}, nil, 400, "User not found: Mallory"},
		{"permission denied", "GET", "/get", admin, map[string]string{"uuid": goblinUUID, "userId": "Bob"}, nil, 403, "User 'Bob' does not have permission to view this entity"},
		{"GM-only", "POST", "/create-folder", admin, map[string]string{"userId": "Alice"}, map[string]any{"name": "Mine", "folderType": "Actor"}, 403, "User 'Alice' must be a GM to create folders"},
		{"execute-js GM-only", "POST", "/execute-js", admin, map[string]string{"userId": "alice"}, map[string]any{"script": "return 1"}, 403, "User 'Alice' must be a GM to execute JavaScript"},
		{"world permission", "GET", "/file-system", admin, map[string]string{"userId": "Bob"}, nil, 403, "User 'Bob' does not have 'FILES_BROWSE' permission required to browse the file system"},
		{"GM-only encounter", "POST", "/start-encounter", admin, map[string]string{"userId": "Bob"}, map[string]any{}, 403, "User 'Bob' must be a GM to start encounters"},
		{"body not JSON", "PUT", "/update", admin, map[string]string{"uuid": ariaUUID}, "{not json", 400, "The request body must be a JSON object"},
		{"wrong document type", "POST", "/give", admin, nil, map[string]any{"toUuid": potionUUID, "itemUuid": potionUUID}, 400, "Target entity must be an Actor, got Item"},
		{"wrong type", "GET", "/search", admin, map[string]string{"limit": "lots"}, nil, 400, "'limit' must be a number"},
		{"body too large", "PUT", "/update", admin, map[string]string{"uuid": ariaUUID}, big, 413, "Request body too large: the limit is 65536 bytes"},
		{"script time-out", "POST", "/execute-js", admin, nil, map[string]any{"script": "while (true) {}"}, 504, "Script exceeded the time limit of 2s"},
		{"unknown path", "GET", "/nope", admin, nil, nil, 404, "Not found: GET /nope"},
		{"stream without key", "GET", "/actor/subscribe", "", nil, nil, 401, "API key is required"},
		{"stream without scope", "GET", "/hooks/subscribe", readOnly, nil, nil, 403, "API key lacks required scope: events:subscribe"},
		{"stream for a player of another world", "GET", "/scene/subscribe", otherWorld, map[string]string{"clientId": "demo"}, nil, 403, "API key is not authorized for client 'demo'"},
		{"stream with a malformed resume id", "GET", "/encounters/subscribe", admin, map[string]string{"lastEventId": "abc"}, nil, 400, "'lastEventId' must be an event id (a whole number), not 'abc'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			query := q()
			for k, v := range tt.query {
				query.Set(k, v)
			}
			resp := tr.do(tt.method, tt.path, tt.key, query, tt.body)
			if resp.status != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.status, tt.status, resp.body)
			}
			body := resp.json(t)
			if body["error"] != tt.msg {
				t.Fatalf("error %q, want %q", body["error"], tt.msg)
			}
			rid, _ := body["requestId"].(string)
			typ, _ := body["type"].(string)
			if !requestIDPattern.MatchString(rid) || !strings.HasSuffix(typ, "-result") || len(body) != 3 {
				t.Fatalf("error body shape: %s", resp.body)
			}
		})
	}
}

// TestScopedUserCannotEscalate: a key acting as Alice cannot read what Alice
// cannot, whatever userId the caller sends.
func TestScopedUserCannotEscalate(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	asAlice, _ := tr.newKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"all"}, ScopedUserId: "Alice"})
	perWorld, _ := tr.newKey(&relayv1.CreateKeyRequest{Name: "alice-in-demo", Scopes: []string{"all"}, ClientIds: []string{"demo"}, ClientUsers: map[string]string{"demo": aliceID}})
	for _, key := range []string{asAlice, perWorld} {
		for _, claimed := range []string{"", "Gamemaster", "gamemaster000001"} {
			query := q("uuid", goblinUUID)
			if claimed != "" {
				query.Set("userId", claimed)
			}
			resp := tr.do(http.MethodGet, "/get", key, query, nil)
			if resp.status != http.StatusForbidden {
				t.Fatalf("key acting as Alice read the Goblin claiming %q: %d %s", claimed, resp.status, resp.body)
			}
		}
		// The search hides the Goblin as well.
		resp := tr.do(http.MethodGet, "/search", key, q("query", "Goblin"), nil)
		if resp.status != http.StatusOK || strings.Contains(string(resp.body), goblinUUID) {
			t.Fatalf("search as Alice: %d %s", resp.status, resp.body)
		}
		// And she still reads her own character.
		if resp := tr.do(http.MethodGet, "/get", key, q("uuid", ariaUUID), nil); resp.status != http.StatusOK {
			t.Fatalf("own actor: %d %s", resp.status, resp.body)
		}
	}
}

// TestParametersFromQueryOrBody: any parameter may come from either place.
func TestParametersFromQueryOrBody(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	// uuid in the body of a GET.
	resp := tr.do(http.MethodGet, "/get", tr.adminKey, nil, map[string]any{"uuid": bromUUID, "userId": "Alice"})
	if resp.status != http.StatusOK || resp.data(t)["name"] != "Brom Ironfist" {
		t.Fatalf("GET with body: %d %s", resp.status, resp.body)
	}
	// clientId in the query and data as JSON text in the query of a PUT.
	resp = tr.do(http.MethodPut, "/update", tr.adminKey, q("clientId", "demo", "uuid", ariaUUID, "data", `{"system.attributes.hp.value": 20}`), nil)
	if resp.status != http.StatusOK {
		t.Fatalf("PUT from query: %d %s", resp.status, resp.body)
	}
	hp := resp.data(t)["document"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
	if hp != float64(20) {
		t.Fatalf("hp = %v, want 20", hp)
	}
	// Array parameters as JSON text in the query.
	resp = tr.do(http.MethodGet, "/structure", tr.adminKey, q("types", `["Actor"]`), nil)
	if resp.status != http.StatusOK || !strings.Contains(string(resp.body), "Heroes") {
		t.Fatalf("structure: %d %s", resp.status, resp.body)
	}
}

// TestBadInputChangesNothing: refused writes leave the world as it was.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	before := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", ariaUUID), nil).body
	for _, tc := range []struct {
		name string
		body any
		code int
	}{
		{"data missing", map[string]any{}, 400},
		{"data not an object", map[string]any{"data": 5}, 400},
		{"id change", map[string]any{"data": map[string]any{"_id": "otherId000000001"}}, 400},
		{"empty name", map[string]any{"data": map[string]any{"name": ""}}, 400},
		{"embedded collection", map[string]any{"data": map[string]any{"items": []any{}}}, 400},
	} {
		resp := tr.do(http.MethodPut, "/update", tr.adminKey, q("uuid", ariaUUID), tc.body)
		if resp.status != tc.code {
			t.Fatalf("%s: %d %s", tc.name, resp.status, resp.body)
		}
	}
	// Alice cannot give away Brom's items, and nothing moves.
	resp := tr.do(http.MethodPost, "/give", tr.adminKey, q("userId", "Alice"), map[string]any{"fromUuid": bromUUID, "toUuid": ariaUUID, "itemName": "Longsword"})
	if resp.status != http.StatusForbidden {
		t.Fatalf("give: %d %s", resp.status, resp.body)
	}
	after := tr.do(http.MethodGet, "/get", tr.adminKey, q("uuid", ariaUUID), nil).body
	if stripRequestID(before) != stripRequestID(after) {
		t.Fatal("refused writes changed Aria")
	}
}

var ridField = regexp.MustCompile(`"requestId":"[^"]*"`)

func stripRequestID(b []byte) string { return ridField.ReplaceAllString(string(b), "") }

// TestDocumentOperations drives the document endpoints end to end.
func TestDocumentOperations(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	admin := tr.adminKey

	// Create as a GM, read back, delete.
	resp := tr.do(http.MethodPost, "/create", admin, nil, map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Bandit", "type": "npc"}, "folder": "monstersFolder01"})
	if resp.status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.status, resp.body)
	}
	uuid, _ := resp.data(t)["uuid"].(string)
	if !strings.HasPrefix(uuid, "Actor.") {
		t.Fatalf("create uuid %q", uuid)
	}
	if r := tr.do(http.MethodGet, "/get", admin, q("uuid", uuid), nil); r.status != 200 || r.data(t)["name"] != "Bandit" {
		t.Fatalf("read created: %d %s", r.status, r.body)
	}
	// A player may not create actors in the demo world.
	if r := tr.do(http.MethodPost, "/create", admin, q("userId", "Alice"), map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Mine"}}); r.status != 403 {
		t.Fatalf("player create: %d %s", r.status, r.body)
	}
	if r := tr.do(http.MethodDelete, "/delete", admin, q("uuid", uuid), nil); r.status != 200 || r.data(t)["deleted"] != true {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := tr.do(http.MethodGet, "/get", admin, q("uuid", uuid), nil); r.status != 404 {
		t.Fatalf("read deleted: %d %s", r.status, r.body)
	}

	// Give a potion from the world to Aria, then remove one.
	resp = tr.do(http.MethodPost, "/give", admin, nil, map[string]any{"toUuid": ariaUUID, "itemUuid": potionUUID, "quantity": 2})
	if resp.status != 200 || resp.data(t)["quantity"] != float64(2) {
		t.Fatalf("give: %d %s", resp.status, resp.body)
	}
	newItem, _ := resp.data(t)["newItemUuid"].(string)
	resp = tr.do(http.MethodPost, "/remove", admin, nil, map[string]any{"actorUuid": ariaUUID, "itemUuid": newItem, "quantity": 1})
	if resp.status != 200 || resp.data(t)["quantity"] != float64(1) {
		t.Fatalf("remove: %d %s", resp.status, resp.body)
	}

	// Increase and decrease a numeric attribute.
	resp = tr.do(http.MethodPost, "/decrease", admin, nil, map[string]any{"uuid": bromUUID, "attribute": "system.attributes.hp.value", "amount": 5})
	if resp.status != 200 {
		t.Fatalf("decrease: %d %s", resp.status, resp.body)
	}
	d := resp.data(t)
	if d["newValue"].(float64) != d["oldValue"].(float64)-5 {
		t.Fatalf("decrease: %v", d)
	}
	if r := tr.do(http.MethodPost, "/increase", admin, nil, map[string]any{"uuid": bromUUID, "attribute": "system.attributes.hp.value"}); r.status != 400 || r.errorText(t) != "'amount' is required" {
		t.Fatalf("increase without amount: %d %s", r.status, r.body)
	}

	// Kill marks defeated and a second kill does not revive.
	for range 2 {
		if r := tr.do(http.MethodPost, "/kill", admin, nil, map[string]any{"uuid": goblinUUID}); r.status != 200 {
			t.Fatalf("kill: %d %s", r.status, r.body)
		}
		g := tr.do(http.MethodGet, "/get", admin, q("uuid", goblinUUID), nil).data(t)
		hp := g["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
		if hp != float64(0) || !strings.Contains(mustJSON(t, g["effects"]), `"dead"`) {
			t.Fatalf("goblin after kill: hp %v effects %s", hp, mustJSON(t, g["effects"]))
		}
	}

	// Search, structure and folders.
	resp = tr.do(http.MethodGet, "/search", admin, q("query", "aria"), nil)
	if resp.status != 200 || !strings.Contains(string(resp.body), ariaUUID) {
		t.Fatalf("search: %d %s", resp.status, resp.body)
	}
	resp = tr.do(http.MethodPost, "/create-folder", admin, nil, map[string]any{"name": "Villains", "folderType": "Actor", "parentFolderId": heroesID})
	if resp.status != 200 || resp.data(t)["parentFolder"] != heroesID {
		t.Fatalf("create-folder: %d %s", resp.status, resp.body)
	}
	folderID, _ := resp.data(t)["id"].(string)
	resp = tr.do(http.MethodDelete, "/delete-folder", admin, q("folderId", folderID), nil)
	if resp.status != 200 || resp.data(t)["deleted"] != true {
		t.Fatalf("delete-folder: %d %s", resp.status, resp.body)
	}

	// Select tokens on the active scene and read the selection.
	resp = tr.do(http.MethodPost, "/select", admin, nil, map[string]any{"name": "Aria Vale", "overwrite": true})
	if resp.status != 200 || resp.data(t)["count"] != float64(1) {
		t.Fatalf("select: %d %s", resp.status, resp.body)
	}
	resp = tr.do(http.MethodGet, "/selected", admin, nil, nil)
	if resp.status != 200 || !strings.Contains(string(resp.body), ariaUUID) {
		t.Fatalf("selected: %d %s", resp.status, resp.body)
	}

	// Execute a script as the GM.
	resp = tr.do(http.MethodPost, "/execute-js", admin, nil, map[string]any{"script": `const a = await game.get("` + ariaUUID + `"); return a.name;`})
	if resp.status != 200 || resp.data(t)["result"] != "Aria Vale" {
		t.Fatalf("execute-js: %d %s", resp.status, resp.body)
	}
}

// TestGRPCDirect calls the services through the in-memory gRPC connection.
func TestGRPCDirect(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	docs := relayv1.NewDocumentServiceClient(tr.conn)
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	got, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: bromUUID, UserId: "Alice"}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if doc := decodeDoc(t, valueJSON(t, got.GetDocument())); doc["name"] != "Brom Ironfist" {
		t.Fatalf("got %v", doc)
	}
	if ids := header.Get("x-request-id"); len(ids) != 1 || !strings.HasPrefix(ids[0], "entity_") {
		t.Fatalf("x-request-id header %v", ids)
	}
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: bromUUID, UserId: "Alice"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("update without data: %v", err)
	}
	_, err = docs.GetDocument(context.Background(), &relayv1.GetDocumentRequest{Uuid: bromUUID})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	// A stream passes authentication, then sends `connected` at once.
	stream, err := relayv1.NewEventServiceClient(tr.conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{})
	var first *relayv1.SubscribeActorsResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil || first.GetEvent().GetName() != "connected" || !strings.Contains(string(valueJSON(t, first.GetEvent().GetData())), `"clientId":"demo"`) {
		t.Fatalf("subscribe: %v %v", first, err)
	}
	noKey, err := relayv1.NewEventServiceClient(tr.conn).SubscribeActors(context.Background(), &relayv1.SubscribeActorsRequest{})
	if err == nil {
		_, err = noKey.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("subscribe without key: %v", err)
	}
}
