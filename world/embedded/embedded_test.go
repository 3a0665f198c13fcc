package embedded_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
	"github.com/tabletop-relay/relay/world/embedded"
	"github.com/tabletop-relay/relay/world/events"
)

// openRegistry opens a host with the demo world and its registry.
func openRegistry(t *testing.T, opts embedded.Options) (*world.Host, *embedded.Registry) {
	t.Helper()
	host, err := world.OpenHost(t.TempDir(), world.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	seed, err := demo.Seed()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Create(context.Background(), demo.ClientID, seed); err != nil {
		t.Fatal(err)
	}
	return host, embedded.NewRegistry(host, opts)
}

// TestRegistryResolvesEmbeddedWorlds: a client id resolves to one world
// offering every capability, the same one while its engine stays open and
// a new one once it was reopened; an unknown id is not found.
func TestRegistryResolvesEmbeddedWorlds(t *testing.T) {
	ctx := context.Background()
	host, reg := openRegistry(t, embedded.Options{})
	w, err := reg.World(ctx, demo.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := reg.World(ctx, demo.ClientID); again != w {
		t.Fatal("a second lookup gave another world")
	}
	for name, ok := range map[string]bool{
		"documents":  capable[world.Documents](w),
		"search":     capable[world.DocumentSearch](w),
		"folders":    capable[world.Folders](w),
		"selection":  capable[world.Selection](w),
		"encounters": capable[world.Encounters](w),
		"files":      capable[world.Files](w),
		"scripts":    capable[world.Scripts](w),
		"events":     capable[world.Events](w),
		"dnd5e":      capable[world.Dnd5e](w),
	} {
		if !ok {
			t.Errorf("the embedded world does not offer %s", name)
		}
	}
	eng, _ := host.World(ctx, demo.ClientID)
	if err := eng.Close(); err != nil {
		t.Fatal(err)
	}
	if again, err := reg.World(ctx, demo.ClientID); err != nil || again == w {
		t.Fatalf("after a reopen: %v, %v; want a world of the new engine", again, err)
	}
	if _, err := reg.World(ctx, "nowhere"); !errors.Is(err, world.ErrNotFound) {
		t.Fatalf("an unknown world: %v, want ErrNotFound", err)
	}
	if ids, err := reg.IDs(ctx); err != nil || len(ids) != 1 || ids[0] != demo.ClientID {
		t.Fatalf("IDs = %v, %v", ids, err)
	}
}

// capable reports whether w offers the capability C.
func capable[C any](w world.World) bool {
	_, err := world.Capability[C](w, "test")
	return err == nil
}

// TestMissingParts: what the registry was not given answers with a clear
// error rather than a wrong result.
func TestMissingParts(t *testing.T) {
	ctx := context.Background()
	_, reg := openRegistry(t, embedded.Options{})
	w, err := reg.World(ctx, demo.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.(world.Scripts).ExecuteJS(ctx, nil, "return 1", world.ScriptOptions{}); !errors.Is(err, world.ErrUnavailable) {
		t.Errorf("a script without a runner: %v, want ErrUnavailable", err)
	}
	if _, err := w.(world.Events).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor}); !errors.Is(err, world.ErrUnimplemented) {
		t.Errorf("a subscription without a hub: %v, want ErrUnimplemented", err)
	}
	if _, _, err := w.(world.Files).ListFiles(ctx, nil, world.ListFilesParams{}); !errors.Is(err, world.ErrUnavailable) {
		t.Errorf("files without a data directory: %v, want ErrUnavailable", err)
	}
}

// TestSubscriptionsComeFromTheHub: with a hub, a subscription is the
// hub's, and sees the world's changes.
func TestSubscriptionsComeFromTheHub(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hub := events.New(events.Options{})
	host, err := world.OpenHost(t.TempDir(), world.Options{Journal: hub})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Close() })
	host.Watch(hub.Committed)
	seed, _ := demo.Seed()
	if _, err := host.Create(ctx, demo.ClientID, seed); err != nil {
		t.Fatal(err)
	}
	w, err := embedded.NewRegistry(host, embedded.Options{Hub: hub}).World(ctx, demo.ClientID)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := w.(world.Events).Subscribe(ctx, nil, world.EventRequest{Channel: world.ChannelActor, ActorUUID: "Actor.ariaVale00000001"})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := w.(world.Documents).Update(ctx, nil, "Actor.ariaVale00000001", world.Document{"system.attributes.hp.value": 3}); err != nil {
		t.Fatal(err)
	}
	ev, err := sub.Next(ctx)
	if err != nil || ev.Name != "actor-update" || ev.Seq <= sub.Start() {
		t.Fatalf("event %+v, %v", ev, err)
	}
}
