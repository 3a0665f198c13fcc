package main

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// TestStructureModuleShape checks GET /structure?shape=module against the
// tabletop module's shape, that it keeps the user's view, that the default
// stays the spec's shape, and that a bad shape is refused.
func TestStructureModuleShape(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	get := func(query ...string) response {
		t.Helper()
		return tr.do(http.MethodGet, "/structure", tr.adminKey, q(query...), nil)
	}
	resp := get("shape", "module", "recursive", "true")
	if resp.status != http.StatusOK {
		t.Fatalf("shape=module: %d %s", resp.status, resp.body)
	}
	d := resp.data(t)
	folders, ok := d["folders"].(map[string]any)
	if !ok {
		t.Fatalf("folders not keyed: %s", resp.body)
	}
	heroes, ok := folders["Heroes"].(map[string]any)
	if !ok || heroes["id"] != heroesID || heroes["uuid"] != "Folder."+heroesID || heroes["type"] != "Actor" {
		t.Fatalf("Heroes folder: %v", folders)
	}
	if _, hasName := heroes["name"]; hasName {
		t.Errorf("a module folder carries its name only as its key: %v", heroes)
	}
	var inHeroes []string
	for _, e := range heroes["entities"].([]any) {
		inHeroes = append(inHeroes, e.(map[string]any)["uuid"].(string))
	}
	if len(inHeroes) == 0 {
		t.Fatalf("Heroes holds no entities: %v", heroes)
	}
	entities, ok := d["entities"].(map[string]any)
	if !ok {
		t.Fatalf("root entities not grouped by type: %s", resp.body)
	}
	for key, list := range entities {
		for _, e := range list.([]any) {
			uuid := e.(map[string]any)["uuid"].(string)
			if want := map[string]string{"actors": "Actor.", "items": "Item.", "scenes": "Scene.", "journalentrys": "JournalEntry.", "macros": "Macro."}[key]; want == "" || uuid[:len(want)] != want {
				t.Errorf("%s holds %s", key, uuid)
			}
		}
	}
	if _, ok := entities["items"]; !ok {
		t.Errorf("no items group at the root: %v", entities)
	}
	// The same tree in the spec's shape (the default) has the same folders.
	spec := get("recursive", "true").data(t)
	if _, ok := spec["folders"].([]any); !ok {
		t.Fatalf("default shape changed: %v", spec)
	}
	if explicit := get("recursive", "true", "shape", "spec"); string(explicit.body) == "" || explicit.status != http.StatusOK {
		t.Fatalf("shape=spec: %d %s", explicit.status, explicit.body)
	}
	// A folder path: its documents stay a list.
	in := get("shape", "module", "path", "Folder."+heroesID).data(t)
	if list, ok := in["entities"].([]any); !ok || len(list) != len(inHeroes) {
		t.Fatalf("path shape=module: %v", in)
	}
	// Only documents of the requested types: empty groups are left out.
	only := get("shape", "module", "types", `["Item"]`).data(t)
	if _, ok := only["entities"].(map[string]any)["actors"]; ok {
		t.Fatalf("actors listed without being asked for: %v", only)
	}
	// A player sees only what they may: Alice does not see the Monsters.
	bob := tr.do(http.MethodGet, "/structure", tr.adminKey, q("shape", "module", "userId", "Alice"), nil)
	if bob.status != http.StatusOK {
		t.Fatalf("Alice: %d %s", bob.status, bob.body)
	}
	if f, _ := bob.data(t)["folders"].(map[string]any); f["Monsters"] != nil {
		t.Fatalf("Alice sees the Monsters folder: %s", bob.body)
	}
	// A bad shape is refused, naming the parameter.
	bad := get("shape", "foundry")
	if bad.status != http.StatusBadRequest || bad.errorText(t) != "'shape' must be spec or module, not foundry" {
		t.Fatalf("bad shape: %d %s", bad.status, bad.body)
	}
	// Over gRPC too.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	out, err := relayv1.NewDocumentServiceClient(tr.conn).GetStructure(ctx, &relayv1.GetStructureRequest{Shape: "module"})
	if err != nil || out.GetStructure().GetStructValue() == nil || len(out.GetStructure().GetStructValue().GetFields()) == 0 {
		t.Fatalf("gRPC shape=module: %v %s", err, out.GetStructure())
	}
}

// TestActorDetailsOmitUnrequested checks that get-actor-details answers only
// the details asked for, over REST (absent, not null) and gRPC (empty).
func TestActorDetailsOmitUnrequested(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	resp := tr.do(http.MethodGet, "/dnd5e/get-actor-details", tr.adminKey, q("actorUuid", ariaUUID, "details", `["resources"]`), nil)
	if resp.status != http.StatusOK {
		t.Fatalf("%d %s", resp.status, resp.body)
	}
	d := resp.data(t)
	if len(d) != 2 || d["uuid"] != ariaUUID || d["resources"] == nil {
		t.Fatalf("want only uuid and resources: %s", resp.body)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.adminKey)
	out, err := relayv1.NewDnd5EServiceClient(tr.conn).GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{ActorUuid: ariaUUID, Details: []string{"stats"}})
	if err != nil {
		t.Fatal(err)
	}
	if out.GetStats() == nil || out.GetResources() != nil || out.GetItems() != nil {
		t.Fatalf("gRPC: %v", out)
	}
}
