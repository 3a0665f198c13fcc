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
	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/relaytest"
)

var requestIDPattern = regexp.MustCompile(`^[a-z0-9-]+_\d+$`)

func TestFirstStartCreatesAdminKeyOnce(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	if tr.AdminKey == "" {
		t.Fatal("first start printed no admin key")
	}
	info, err := os.Stat(filepath.Join(tr.DataDir, "admin.key"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key mode = %v, want 0600", info.Mode().Perm())
	}
	data, _ := os.ReadFile(filepath.Join(tr.DataDir, "admin.key"))
	if strings.TrimSpace(string(data)) != tr.AdminKey {
		t.Fatal("admin.key does not hold the printed key")
	}
	if _, err := os.Stat(filepath.Join(tr.DataDir, "worlds", "demo", "world.db")); err != nil {
		t.Fatalf("demo world not created: %v", err)
	}
	// A second start on the same data prints nothing and keeps the world.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	again := startTestRelay(t, func(c *node.Config) { c.DataDir = tr.DataDir })
	if again.AdminKey != "" {
		t.Fatal("second start created another admin key")
	}
	resp := again.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("after restart: %d %s", resp.Status, resp.Body)
	}
}

func TestHealthOpenAPIAndReflection(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	resp := tr.Do(http.MethodGet, "/healthz", "", nil, nil)
	want := buildInfo()
	if resp.Status != http.StatusOK || string(resp.Body) != fmt.Sprintf(`{"status":"SERVING","version":%q,"commit":%q,"date":%q}`, want.Version, want.Commit, want.Date) {
		t.Fatalf("healthz: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodGet, "/openapi.json", "", nil, nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("openapi: %d", resp.Status)
	}
	paths, _ := resp.JSON(t)["paths"].(map[string]any)
	for _, p := range []string{"/get", "/update", "/dnd5e/short-rest", "/hooks/subscribe", "/keys"} {
		if _, ok := paths[p]; !ok {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
	// The served document is the generated OpenAPI 3 one; what it says is
	// checked against the relay's answers by TestOpenAPIDescribesAnswers.
	if !bytes.Equal(resp.Body, openapi.JSON) || resp.JSON(t)["openapi"] != "3.0.3" {
		t.Errorf("/openapi.json is not gen/openapi/relay.json")
	}
	// gRPC over h2c on the same port: the standard health service.
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health over h2c: %v %v", hc, err)
	}
	// And an authenticated relay call over the same h2c connection.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	got, err := relayv1.NewDocumentServiceClient(conn).GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.AriaUUID})
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
	resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.GuardUUID, "userId", "Alice"), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("status %d: %s", resp.Status, resp.Body)
	}
	body := resp.JSON(t)
	rid, _ := body["requestId"].(string)
	if !regexp.MustCompile(`^entity_\d+$`).MatchString(rid) {
		t.Fatalf("requestId %q", rid)
	}
	if resp.Header.Get("X-Request-Id") != rid {
		t.Fatalf("X-Request-Id %q, body %q", resp.Header.Get("X-Request-Id"), rid)
	}
	want := fmt.Sprintf(`{"type":"entity-result","requestId":%q,"data":{"img":%s,"name":"Town Guard","type":"Actor","uuid":%q}}`,
		rid, mustJSON(t, resp.Data(t)["img"]), relaytest.GuardUUID)
	if string(resp.Body) != want {
		t.Fatalf("LIMITED body:\n got %s\nwant %s", resp.Body, want)
	}

	// Errors carry the same envelope fields.
	resp = tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.GoblinUUID, "userId", "Alice"), nil)
	rid = resp.Header.Get("X-Request-Id")
	want = fmt.Sprintf(`{"type":"entity-result","requestId":%q,"error":"User 'Alice' does not have permission to view this entity"}`, rid)
	if resp.Status != http.StatusForbidden || string(resp.Body) != want {
		t.Fatalf("NONE read: %d\n got %s\nwant %s", resp.Status, resp.Body, want)
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
				r := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil)
				id := r.Header.Get("X-Request-Id")
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
		{"NONE", relaytest.GoblinUUID, "Alice", 403, false, 403},
		{"LIMITED", relaytest.GuardUUID, "Alice", 200, true, 403},
		{"OBSERVER", relaytest.MaraUUID, "Alice", 200, false, 403},
		{"OWNER", relaytest.AriaUUID, "Alice", 200, false, 200},
		{"NONE as GM", relaytest.GoblinUUID, "Gamemaster", 200, false, 200},
		{"LIMITED as GM", relaytest.GuardUUID, "Gamemaster", 200, false, 200},
		{"OBSERVER as GM", relaytest.MaraUUID, "Gamemaster", 200, false, 200},
		{"OWNER as GM", relaytest.AriaUUID, "Gamemaster", 200, false, 200},
		{"NONE without user", relaytest.GoblinUUID, "", 200, false, 200},
		{"LIMITED without user", relaytest.GuardUUID, "", 200, false, 200},
		{"OBSERVER without user", relaytest.MaraUUID, "", 200, false, 200},
		{"OWNER without user", relaytest.AriaUUID, "", 200, false, 200},
	}
	for _, r := range rows {
		t.Run(r.level, func(t *testing.T) {
			query := relaytest.Q("uuid", r.uuid)
			if r.userID != "" {
				query.Set("userId", r.userID)
			}
			resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, query, nil)
			if resp.Status != r.readCode {
				t.Fatalf("read: %d %s", resp.Status, resp.Body)
			}
			if r.readCode == 200 {
				data := resp.Data(t)
				if r.limited {
					if len(data) != 4 || data["name"] == nil || data["uuid"] != r.uuid || data["type"] != "Actor" {
						t.Fatalf("LIMITED data %v", data)
					}
				} else if data["system"] == nil || data["ownership"] == nil {
					t.Fatalf("full data lacks fields: %v", data)
				}
			}
			before := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", r.uuid), nil).Data(t)["name"]
			resp = tr.Do(http.MethodPut, "/update", tr.AdminKey, query, map[string]any{"data": map[string]any{"system.details.biography.value": "changed by " + r.level}})
			if resp.Status != r.writeCode {
				t.Fatalf("write: %d %s", resp.Status, resp.Body)
			}
			if r.writeCode == 403 {
				// The refusal names the document only for a user
				// who may see its name.
				name, _ := before.(string)
				if r.readCode != 200 {
					name = r.uuid
				}
				wantMsg := fmt.Sprintf("User '%s' does not have permission to update '%s'", r.userID, name)
				if resp.ErrorText(t) != wantMsg {
					t.Fatalf("write error %q, want %q", resp.ErrorText(t), wantMsg)
				}
				after := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", r.uuid), nil).Data(t)
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
	readOnly, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "ro", Scopes: []string{"entity:read"}})
	otherWorld, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "elsewhere", Scopes: []string{"all"}, ClientIds: []string{"elsewhere"}})
	revoked, revokedID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "gone", Scopes: []string{"all"}})
	expiring, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "soon", Scopes: []string{"all"}, ExpiresAt: time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339)})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	if _, err := relayv1.NewKeyServiceClient(tr.Conn).RevokeKey(ctx, &relayv1.RevokeKeyRequest{Id: revokedID}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // let the expiring key expire (RFC 3339 has whole seconds)

	admin := tr.AdminKey
	big := `{"data":{"name":"` + strings.Repeat("x", 70<<10) + `"}}`
	tests := []struct {
		name, method, path, key string
		query                   map[string]string
		body                    any
		status                  int
		msg                     string
	}{
		{"missing key", "GET", "/get", "", map[string]string{"uuid": relaytest.AriaUUID}, nil, 401, "API key is required"},
		{"unknown key", "GET", "/get", "rk_nope", map[string]string{"uuid": relaytest.AriaUUID}, nil, 401, "Invalid API key"},
		{"revoked key", "GET", "/get", revoked, map[string]string{"uuid": relaytest.AriaUUID}, nil, 401, "API key has been revoked"},
		{"expired key", "GET", "/get", expiring, map[string]string{"uuid": relaytest.AriaUUID}, nil, 401, "API key has expired"},
		{"missing scope", "PUT", "/update", readOnly, map[string]string{"uuid": relaytest.AriaUUID}, map[string]any{"data": map[string]any{"name": "x"}}, 403, "API key lacks required scope: entity:write"},
		{"key bound to another world", "GET", "/get", otherWorld, map[string]string{"uuid": relaytest.AriaUUID, "clientId": "demo"}, nil, 403, "API key is not authorized for client 'demo'"},
		{"unknown world", "GET", "/get", admin, map[string]string{"uuid": relaytest.AriaUUID, "clientId": "nowhere"}, nil, 404, "Unknown world: nowhere"},
		{"unknown document", "GET", "/get", admin, map[string]string{"uuid": "Actor.doesNotExist0001"}, nil, 404, "Entity not found: Actor.doesNotExist0001"},
		{"missing parameter", "GET", "/get", admin, nil, nil, 400, "'uuid' is required"},
		{"user not found", "GET", "/get", admin, map[string]string{"uuid": relaytest.AriaUUID, "userId": "Mallory"}, nil, 400, "User not found: Mallory"},
		{"permission denied", "GET", "/get", admin, map[string]string{"uuid": relaytest.GoblinUUID, "userId": "Bob"}, nil, 403, "User 'Bob' does not have permission to view this entity"},
		{"GM-only", "POST", "/create-folder", admin, map[string]string{"userId": "Alice"}, map[string]any{"name": "Mine", "folderType": "Actor"}, 403, "User 'Alice' must be a GM to create folders"},
		{"execute-js GM-only", "POST", "/execute-js", admin, map[string]string{"userId": "alice"}, map[string]any{"script": "return 1"}, 403, "User 'Alice' must be a GM to execute JavaScript"},
		{"world permission", "GET", "/file-system", admin, map[string]string{"userId": "Bob"}, nil, 403, "User 'Bob' does not have 'FILES_BROWSE' permission required to browse the file system"},
		{"GM-only encounter", "POST", "/start-encounter", admin, map[string]string{"userId": "Bob"}, map[string]any{}, 403, "User 'Bob' must be a GM to start encounters"},
		{"body not JSON", "PUT", "/update", admin, map[string]string{"uuid": relaytest.AriaUUID}, "{not json", 400, "The request body must be a JSON object"},
		{"wrong document type", "POST", "/give", admin, nil, map[string]any{"toUuid": relaytest.PotionUUID, "itemUuid": relaytest.PotionUUID}, 400, "Target entity must be an Actor, got Item"},
		{"wrong type", "GET", "/search", admin, map[string]string{"limit": "lots"}, nil, 400, "'limit' must be a number"},
		{"body too large", "PUT", "/update", admin, map[string]string{"uuid": relaytest.AriaUUID}, big, 413, "Request body too large: the limit is 65536 bytes"},
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
			query := relaytest.Q()
			for k, v := range tt.query {
				query.Set(k, v)
			}
			resp := tr.Do(tt.method, tt.path, tt.key, query, tt.body)
			if resp.Status != tt.status {
				t.Fatalf("status %d, want %d: %s", resp.Status, tt.status, resp.Body)
			}
			body := resp.JSON(t)
			if body["error"] != tt.msg {
				t.Fatalf("error %q, want %q", body["error"], tt.msg)
			}
			rid, _ := body["requestId"].(string)
			typ, _ := body["type"].(string)
			if !requestIDPattern.MatchString(rid) || !strings.HasSuffix(typ, "-result") || len(body) != 3 {
				t.Fatalf("error body shape: %s", resp.Body)
			}
		})
	}
}

// TestScopedUserCannotEscalate: a key acting as Alice cannot read what Alice
// cannot, whatever userId the caller sends.
func TestScopedUserCannotEscalate(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	asAlice, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice", Scopes: []string{"all"}, ScopedUserId: "Alice"})
	perWorld, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice-in-demo", Scopes: []string{"all"}, ClientIds: []string{"demo"}, ClientUsers: map[string]string{"demo": relaytest.AliceID}})
	for _, key := range []string{asAlice, perWorld} {
		for _, claimed := range []string{"", "Gamemaster", "gamemaster000001"} {
			query := relaytest.Q("uuid", relaytest.GoblinUUID)
			if claimed != "" {
				query.Set("userId", claimed)
			}
			resp := tr.Do(http.MethodGet, "/get", key, query, nil)
			if resp.Status != http.StatusForbidden {
				t.Fatalf("key acting as Alice read the Goblin claiming %q: %d %s", claimed, resp.Status, resp.Body)
			}
		}
		// The search hides the Goblin as well.
		resp := tr.Do(http.MethodGet, "/search", key, relaytest.Q("query", "Goblin"), nil)
		if resp.Status != http.StatusOK || strings.Contains(string(resp.Body), relaytest.GoblinUUID) {
			t.Fatalf("search as Alice: %d %s", resp.Status, resp.Body)
		}
		// And she still reads her own character.
		if resp := tr.Do(http.MethodGet, "/get", key, relaytest.Q("uuid", relaytest.AriaUUID), nil); resp.Status != http.StatusOK {
			t.Fatalf("own actor: %d %s", resp.Status, resp.Body)
		}
	}
}

// TestParametersFromQueryOrBody: any parameter may come from either place.
func TestParametersFromQueryOrBody(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	// uuid in the body of a GET.
	resp := tr.Do(http.MethodGet, "/get", tr.AdminKey, nil, map[string]any{"uuid": relaytest.BromUUID, "userId": "Alice"})
	if resp.Status != http.StatusOK || resp.Data(t)["name"] != "Brom Ironfist" {
		t.Fatalf("GET with body: %d %s", resp.Status, resp.Body)
	}
	// clientId in the query and data as JSON text in the query of a PUT.
	resp = tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("clientId", "demo", "uuid", relaytest.AriaUUID, "data", `{"system.attributes.hp.value": 20}`), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("PUT from query: %d %s", resp.Status, resp.Body)
	}
	hp := resp.Data(t)["document"].(map[string]any)["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
	if hp != float64(20) {
		t.Fatalf("hp = %v, want 20", hp)
	}
	// Array parameters as JSON text in the query.
	resp = tr.Do(http.MethodGet, "/structure", tr.AdminKey, relaytest.Q("types", `["Actor"]`), nil)
	if resp.Status != http.StatusOK || !strings.Contains(string(resp.Body), "Heroes") {
		t.Fatalf("structure: %d %s", resp.Status, resp.Body)
	}
}

// TestBadInputChangesNothing: refused writes leave the world as it was.
func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	before := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Body
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
		resp := tr.Do(http.MethodPut, "/update", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), tc.body)
		if resp.Status != tc.code {
			t.Fatalf("%s: %d %s", tc.name, resp.Status, resp.Body)
		}
	}
	// Alice cannot give away Brom's items, and nothing moves.
	resp := tr.Do(http.MethodPost, "/give", tr.AdminKey, relaytest.Q("userId", "Alice"), map[string]any{"fromUuid": relaytest.BromUUID, "toUuid": relaytest.AriaUUID, "itemName": "Longsword"})
	if resp.Status != http.StatusForbidden {
		t.Fatalf("give: %d %s", resp.Status, resp.Body)
	}
	after := tr.Do(http.MethodGet, "/get", tr.AdminKey, relaytest.Q("uuid", relaytest.AriaUUID), nil).Body
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
	admin := tr.AdminKey

	// Create as a GM, read back, delete.
	resp := tr.Do(http.MethodPost, "/create", admin, nil, map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Bandit", "type": "npc"}, "folder": "monstersFolder01"})
	if resp.Status != http.StatusOK {
		t.Fatalf("create: %d %s", resp.Status, resp.Body)
	}
	uuid, _ := resp.Data(t)["uuid"].(string)
	if !strings.HasPrefix(uuid, "Actor.") {
		t.Fatalf("create uuid %q", uuid)
	}
	if r := tr.Do(http.MethodGet, "/get", admin, relaytest.Q("uuid", uuid), nil); r.Status != 200 || r.Data(t)["name"] != "Bandit" {
		t.Fatalf("read created: %d %s", r.Status, r.Body)
	}
	// A player may not create actors in the demo world.
	if r := tr.Do(http.MethodPost, "/create", admin, relaytest.Q("userId", "Alice"), map[string]any{"entityType": "Actor", "data": map[string]any{"name": "Mine"}}); r.Status != 403 {
		t.Fatalf("player create: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodDelete, "/delete", admin, relaytest.Q("uuid", uuid), nil); r.Status != 200 || r.Data(t)["deleted"] != true {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	if r := tr.Do(http.MethodGet, "/get", admin, relaytest.Q("uuid", uuid), nil); r.Status != 404 {
		t.Fatalf("read deleted: %d %s", r.Status, r.Body)
	}

	// Give a potion from the world to Aria, then remove one.
	resp = tr.Do(http.MethodPost, "/give", admin, nil, map[string]any{"toUuid": relaytest.AriaUUID, "itemUuid": relaytest.PotionUUID, "quantity": 2})
	if resp.Status != 200 || resp.Data(t)["quantity"] != float64(2) {
		t.Fatalf("give: %d %s", resp.Status, resp.Body)
	}
	newItem, _ := resp.Data(t)["newItemUuid"].(string)
	resp = tr.Do(http.MethodPost, "/remove", admin, nil, map[string]any{"actorUuid": relaytest.AriaUUID, "itemUuid": newItem, "quantity": 1})
	if resp.Status != 200 || resp.Data(t)["quantity"] != float64(1) {
		t.Fatalf("remove: %d %s", resp.Status, resp.Body)
	}

	// Increase and decrease a numeric attribute.
	resp = tr.Do(http.MethodPost, "/decrease", admin, nil, map[string]any{"uuid": relaytest.BromUUID, "attribute": "system.attributes.hp.value", "amount": 5})
	if resp.Status != 200 {
		t.Fatalf("decrease: %d %s", resp.Status, resp.Body)
	}
	d := resp.Data(t)
	if d["newValue"].(float64) != d["oldValue"].(float64)-5 {
		t.Fatalf("decrease: %v", d)
	}
	if r := tr.Do(http.MethodPost, "/increase", admin, nil, map[string]any{"uuid": relaytest.BromUUID, "attribute": "system.attributes.hp.value"}); r.Status != 400 || r.ErrorText(t) != "'amount' is required" {
		t.Fatalf("increase without amount: %d %s", r.Status, r.Body)
	}

	// Kill marks defeated and a second kill does not revive.
	for range 2 {
		if r := tr.Do(http.MethodPost, "/kill", admin, nil, map[string]any{"uuid": relaytest.GoblinUUID}); r.Status != 200 {
			t.Fatalf("kill: %d %s", r.Status, r.Body)
		}
		g := tr.Do(http.MethodGet, "/get", admin, relaytest.Q("uuid", relaytest.GoblinUUID), nil).Data(t)
		hp := g["system"].(map[string]any)["attributes"].(map[string]any)["hp"].(map[string]any)["value"]
		if hp != float64(0) || !strings.Contains(mustJSON(t, g["effects"]), `"dead"`) {
			t.Fatalf("goblin after kill: hp %v effects %s", hp, mustJSON(t, g["effects"]))
		}
	}

	// Search, structure and folders.
	resp = tr.Do(http.MethodGet, "/search", admin, relaytest.Q("query", "aria"), nil)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), relaytest.AriaUUID) {
		t.Fatalf("search: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodPost, "/create-folder", admin, nil, map[string]any{"name": "Villains", "folderType": "Actor", "parentFolderId": relaytest.HeroesID})
	if resp.Status != 200 || resp.Data(t)["parentFolder"] != relaytest.HeroesID {
		t.Fatalf("create-folder: %d %s", resp.Status, resp.Body)
	}
	folderID, _ := resp.Data(t)["id"].(string)
	resp = tr.Do(http.MethodDelete, "/delete-folder", admin, relaytest.Q("folderId", folderID), nil)
	if resp.Status != 200 || resp.Data(t)["deleted"] != true {
		t.Fatalf("delete-folder: %d %s", resp.Status, resp.Body)
	}

	// Select tokens on the active scene and read the selection.
	resp = tr.Do(http.MethodPost, "/select", admin, nil, map[string]any{"name": "Aria Vale", "overwrite": true})
	if resp.Status != 200 || resp.Data(t)["count"] != float64(1) {
		t.Fatalf("select: %d %s", resp.Status, resp.Body)
	}
	resp = tr.Do(http.MethodGet, "/selected", admin, nil, nil)
	if resp.Status != 200 || !strings.Contains(string(resp.Body), relaytest.AriaUUID) {
		t.Fatalf("selected: %d %s", resp.Status, resp.Body)
	}

	// Execute a script as the GM.
	resp = tr.Do(http.MethodPost, "/execute-js", admin, nil, map[string]any{"script": `const a = await game.get("` + relaytest.AriaUUID + `"); return a.name;`})
	if resp.Status != 200 || resp.Data(t)["result"] != "Aria Vale" {
		t.Fatalf("execute-js: %d %s", resp.Status, resp.Body)
	}
}

// TestGRPCDirect calls the services through the in-memory gRPC connection.
func TestGRPCDirect(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	docs := relayv1.NewDocumentServiceClient(tr.Conn)
	var header metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	got, err := docs.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: relaytest.BromUUID, UserId: "Alice"}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if doc := decodeDoc(t, valueJSON(t, got.GetDocument())); doc["name"] != "Brom Ironfist" {
		t.Fatalf("got %v", doc)
	}
	if ids := header.Get("x-request-id"); len(ids) != 1 || !strings.HasPrefix(ids[0], "entity_") {
		t.Fatalf("x-request-id header %v", ids)
	}
	_, err = docs.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: relaytest.BromUUID, UserId: "Alice"})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("update without data: %v", err)
	}
	_, err = docs.GetDocument(context.Background(), &relayv1.GetDocumentRequest{Uuid: relaytest.BromUUID})
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no key: %v", err)
	}
	// A stream passes authentication, then sends `connected` at once.
	stream, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(ctx, &relayv1.SubscribeActorsRequest{})
	var first *relayv1.SubscribeActorsResponse
	if err == nil {
		first, err = stream.Recv()
	}
	if err != nil || first.GetEvent().GetName() != "connected" || !strings.Contains(string(valueJSON(t, first.GetEvent().GetData())), `"clientId":"demo"`) {
		t.Fatalf("subscribe: %v %v", first, err)
	}
	noKey, err := relayv1.NewEventServiceClient(tr.Conn).SubscribeActors(context.Background(), &relayv1.SubscribeActorsRequest{})
	if err == nil {
		_, err = noKey.Recv()
	}
	if status.Code(err) != codes.Unauthenticated {
		t.Fatalf("subscribe without key: %v", err)
	}
}
