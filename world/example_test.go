package world_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tabletop-relay/relay/world"
)

// ExampleEngine_Mutate moves gold from one actor to another in one
// transaction: both actors change, or (on any error) neither does. This is
// how the ruleset builds its multi-document operations.
func ExampleEngine_Mutate() {
	dir, _ := os.MkdirTemp("", "world-example-")
	defer os.RemoveAll(dir)
	host, _ := world.OpenHost(dir, world.Options{
		OnCommit: func(changes []world.Change) {
			for _, c := range changes {
				fmt.Println("changed", c.UUID)
			}
		},
	})
	defer host.Close()
	engine, _ := host.Create(context.Background(), "example", world.Seed{
		Actors: []world.Document{
			{"_id": "Alice00000000001", "name": "Alice", "system": world.Document{"currency": world.Document{"gp": 10}}},
			{"_id": "Bob0000000000001", "name": "Bob", "system": world.Document{"currency": world.Document{"gp": 0}}},
		},
	})
	pay := func(ctx context.Context, from, to string, gp float64) error {
		return engine.Mutate(ctx, func(tx *world.Tx) error {
			payer, err := tx.Get(from) // a private copy
			if err != nil {
				return err
			}
			have, _ := world.Property(payer, "system.currency.gp")
			if have.(float64) < gp {
				return world.Errorf(world.ErrFailedPrecondition, "Not enough gold")
			}
			if _, err := tx.Update(from, world.Document{"system.currency.gp": have.(float64) - gp}); err != nil {
				return err
			}
			payee, err := tx.View().Get(to) // read-only, no copy
			if err != nil {
				return err
			}
			got, _ := world.Property(payee, "system.currency.gp")
			_, err = tx.Update(to, world.Document{"system.currency.gp": got.(float64) + gp})
			return err
		})
	}

	ctx := context.Background()
	fmt.Println(pay(ctx, "Actor.Alice00000000001", "Actor.Bob0000000000001", 4))
	fmt.Println(pay(ctx, "Actor.Alice00000000001", "Actor.Bob0000000000001", 40))
	engine.View(ctx, func(v *world.View) error {
		for _, uuid := range []string{"Actor.Alice00000000001", "Actor.Bob0000000000001"} {
			doc, _ := v.Get(uuid)
			gp, _ := world.Property(doc, "system.currency.gp")
			fmt.Println(doc["name"], gp)
		}
		return nil
	})
	// Output:
	// changed Actor.Alice00000000001
	// changed Actor.Bob0000000000001
	// <nil>
	// Not enough gold
	// Alice 6
	// Bob 4
}
