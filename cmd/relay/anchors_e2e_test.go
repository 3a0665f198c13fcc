package main

import (
	"context"
	"net/http"
	"testing"

	"google.golang.org/grpc/metadata"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
)

// TestStructureModuleShape checks GET /structure?shape=module against the
// tabletop module's shape, that it keeps the user's view, that the default
// stays the spec's shape, and that a bad shape is refused.
func TestStructureModuleShape(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	get := func(query ...string) relaytest.Response {
		t.Helper()
		return tr.Do(http.MethodGet, "/structure", tr.AdminKey, relaytest.Q(query...), nil)
	}
	resp := get("shape", "module", "recursive", "true")
	if resp.Status != http.StatusOK {
		t.Fatalf("shape=module: %d %s", resp.Status, resp.Body)
	}
	d := resp.Data(t)
	folders, ok := d["folders"].(map[string]any)
	if !ok {
		t.Fatalf("folders not keyed: %s", resp.Body)
	}
	heroes, ok := folders["Heroes"].(map[string]any)
	if !ok || heroes["id"] != relaytest.HeroesID || heroes["uuid"] != "Folder."+relaytest.HeroesID || heroes["type"] != "Actor" {
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
		t.Fatalf("root entities not grouped by type: %s", resp.Body)
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
	spec := get("recursive", "true").Data(t)
	if _, ok := spec["folders"].([]any); !ok {
		t.Fatalf("default shape changed: %v", spec)
	}
	if explicit := get("recursive", "true", "shape", "spec"); string(explicit.Body) == "" || explicit.Status != http.StatusOK {
		t.Fatalf("shape=spec: %d %s", explicit.Status, explicit.Body)
	}
	// A folder path: its documents stay a list.
	in := get("shape", "module", "path", "Folder."+relaytest.HeroesID).Data(t)
	if list, ok := in["entities"].([]any); !ok || len(list) != len(inHeroes) {
		t.Fatalf("path shape=module: %v", in)
	}
	// Only documents of the requested types: empty groups are left out.
	only := get("shape", "module", "types", `["Item"]`).Data(t)
	if _, ok := only["entities"].(map[string]any)["actors"]; ok {
		t.Fatalf("actors listed without being asked for: %v", only)
	}
	// A player sees only what they may: Alice does not see the Monsters.
	bob := tr.Do(http.MethodGet, "/structure", tr.AdminKey, relaytest.Q("shape", "module", "userId", "Alice"), nil)
	if bob.Status != http.StatusOK {
		t.Fatalf("Alice: %d %s", bob.Status, bob.Body)
	}
	if f, _ := bob.Data(t)["folders"].(map[string]any); f["Monsters"] != nil {
		t.Fatalf("Alice sees the Monsters folder: %s", bob.Body)
	}
	// A bad shape is refused, naming the parameter.
	bad := get("shape", "foundry")
	if bad.Status != http.StatusBadRequest || bad.ErrorText(t) != "'shape' must be spec or module, not foundry" {
		t.Fatalf("bad shape: %d %s", bad.Status, bad.Body)
	}
	// Over gRPC too.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	out, err := relayv1.NewDocumentServiceClient(tr.Conn).GetStructure(ctx, &relayv1.GetStructureRequest{Shape: "module"})
	if err != nil || out.GetStructure().GetStructValue() == nil || len(out.GetStructure().GetStructValue().GetFields()) == 0 {
		t.Fatalf("gRPC shape=module: %v %s", err, out.GetStructure())
	}
}

// TestActorDetailsOmitUnrequested checks that get-actor-details answers only
// the details asked for, over REST (absent, not null) and gRPC (empty).
func TestActorDetailsOmitUnrequested(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	resp := tr.Do(http.MethodGet, "/dnd5e/get-actor-details", tr.AdminKey, relaytest.Q("actorUuid", relaytest.AriaUUID, "details", `["resources"]`), nil)
	if resp.Status != http.StatusOK {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	d := resp.Data(t)
	if len(d) != 2 || d["uuid"] != relaytest.AriaUUID || d["resources"] == nil {
		t.Fatalf("want only uuid and resources: %s", resp.Body)
	}
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", tr.AdminKey)
	out, err := relayv1.NewDnd5EServiceClient(tr.Conn).GetActorDetails(ctx, &relayv1.GetActorDetailsRequest{ActorUuid: relaytest.AriaUUID, Details: []string{"stats"}})
	if err != nil {
		t.Fatal(err)
	}
	if out.GetStats() == nil || out.GetResources() != nil || out.GetItems() != nil {
		t.Fatalf("gRPC: %v", out)
	}
}
