package client_test

import (
	"context"
	"fmt"
	"iter"
	"log"
	"os"
	"time"

	"github.com/tabletop-relay/relay/client"
	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
)

// A tour of the client: read a document into a type of your own, change
// it, run a fifth-edition operation and follow the actor's events. The
// relay's address and an API key come from the environment (the tests set
// RELAY_ADDR and RELAY_API_KEY for a relay they start).
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(os.Getenv("RELAY_ADDR"),
		client.WithAPIKey(os.Getenv("RELAY_API_KEY")),
		client.WithWorld("demo"),
		client.WithUser("Alice"), // every call acts as the player Alice
	)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Read: documents are JSON, decoded into map[string]any or your type.
	got, err := c.Documents.GetDocument(ctx, &relayv1.GetDocumentRequest{Uuid: "Actor.townGuard0000001"})
	if err != nil {
		log.Fatal(err)
	}
	type document struct {
		Name string `json:"name"`
		Type string `json:"type"`
	}
	guard, err := client.Decode[document](got.GetDocument())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read:", guard.Name, guard.Type) // LIMITED to Alice: name, uuid, type and image

	// Follow the events of Alice's character, Aria Vale. A program would
	// range over the stream in a goroutine of its own; here the events are
	// pulled one by one. The stream reconnects by itself and resumes after
	// the last event seen.
	events := c.FollowActors(ctx, &relayv1.SubscribeActorsRequest{ActorUuid: "Actor.ariaVale00000001"})
	next, stop := iter.Pull2(events)
	defer stop()
	if ev, err, ok := next(); ok && err == nil {
		fmt.Println("event:", ev.GetName()) // the stream's own first event
	}

	// Update with dotted paths.
	data, _ := client.Data(map[string]any{"system.attributes.hp.value": 5})
	if _, err := c.Documents.UpdateDocument(ctx, &relayv1.UpdateDocumentRequest{Uuid: "Actor.ariaVale00000001", Data: data}); err != nil {
		log.Fatal(err)
	}
	ev, err, ok := next()
	if !ok || err != nil {
		log.Fatal("stream ended: ", err)
	}
	change, _ := client.DecodeMap(ev.GetData())
	fmt.Println("event:", ev.GetName(), change["changes"])

	// A fifth-edition operation: a long rest heals her.
	rest, err := c.Dnd5e.LongRest(ctx, &relayv1.LongRestRequest{ActorUuid: "Actor.ariaVale00000001"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rest:", rest.GetResult().GetType())
	// Output:
	// read: Town Guard Actor
	// event: connected
	// event: actor-update map[system:map[attributes:map[hp:map[value:5]]]]
	// rest: long
}
