package world

import (
	"context"
	"testing"
)

// itemNamed finds an actor's item by name.
func itemNamed(t *testing.T, w Documents, actorUUID, name string) Document {
	t.Helper()
	for _, d := range mustGet(t, w, actorUUID)["items"].([]any) {
		if item := d.(Document); item["name"] == name {
			return item
		}
	}
	return nil
}

func TestGive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("part of a stack joins the target's stack", func(t *testing.T) {
		t.Parallel()
		tw := newTestWorld(t)
		res, err := tw.Give(ctx, nil, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: potionUUID, Quantity: 2})
		if err != nil {
			t.Fatal(err)
		}
		want := GiveResult{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: potionUUID, NewItemUUID: actorBob + ".Item.ItemPotion000002", Quantity: 3}
		if res != want {
			t.Errorf("Give = %+v, want %+v", res, want)
		}
		if q := num(t, itemNamed(t, tw, actorOwner, "Potion"), "system.quantity"); q != 1 {
			t.Errorf("source quantity = %v, want 1", q)
		}
		if n := len(tw.log.all()); n != 1 {
			t.Errorf("%d commits, want 1", n)
		}
	})

	t.Run("a whole item moves", func(t *testing.T) {
		t.Parallel()
		tw := newTestWorld(t)
		res, err := tw.Give(ctx, nil, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemName: "sword"})
		if err != nil {
			t.Fatal(err)
		}
		if res.ItemUUID != swordUUID || res.NewItemUUID != actorBob+".Item.NewId00000000001" || res.Quantity != 1 {
			t.Errorf("Give = %+v", res)
		}
		if itemNamed(t, tw, actorOwner, "Sword") != nil {
			t.Error("the sword is still on the source")
		}
		given := itemNamed(t, tw, actorBob, "Sword")
		if given == nil || given["type"] != "weapon" || num(t, given, "system.quantity") != 1 {
			t.Errorf("target's sword = %v", given)
		}
	})

	t.Run("a world item is copied by name", func(t *testing.T) {
		t.Parallel()
		tw := newTestWorld(t)
		alice := tw.user(t, aliceID)
		res, err := tw.Give(ctx, alice, GiveParams{ToUUID: actorOwner, ItemName: "rop", Quantity: 5})
		if err != nil {
			t.Fatal(err)
		}
		if res.ItemUUID != ropeUUID || res.Quantity != 5 {
			t.Errorf("Give = %+v", res)
		}
		rope := itemNamed(t, tw, actorOwner, "Rope")
		if rope == nil || num(t, rope, "system.quantity") != 5 || rope["folder"] != nil || rope["ownership"] != nil {
			t.Errorf("copied rope = %v", rope)
		}
		if mustGet(t, tw, ropeUUID) == nil {
			t.Error("the world item is gone")
		}
		// An item Alice cannot observe is not hers to copy.
		_, err = tw.Give(ctx, alice, GiveParams{ToUUID: actorOwner, ItemName: "Secret Ring"})
		wantError(t, err, ErrNotFound, "Item not found: Secret Ring")
		_, err = tw.Give(ctx, alice, GiveParams{ToUUID: actorOwner, ItemUUID: secretItem})
		wantError(t, err, ErrPermission, "User 'Alice' does not have permission to view this entity")
	})

	errorTests := []struct {
		name string
		user string
		p    GiveParams
		kind error
		msg  string
	}{
		{"no target", "", GiveParams{ItemUUID: swordUUID}, ErrInvalid, "'toUuid' is required"},
		{"no item", "", GiveParams{ToUUID: actorBob}, ErrInvalid, "'itemUuid' or 'itemName' is required"},
		{"negative quantity", "", GiveParams{ToUUID: actorBob, ItemUUID: swordUUID, Quantity: -1}, ErrInvalid, "'quantity' must be a positive number"},
		{"same actor", "", GiveParams{FromUUID: actorBob, ToUUID: actorBob, ItemUUID: swordUUID}, ErrInvalid, "'fromUuid' and 'toUuid' must name different actors"},
		{"unknown source", "", GiveParams{FromUUID: "Actor.Missing000000001", ToUUID: actorBob, ItemUUID: swordUUID}, ErrNotFound, "Source entity not found: Actor.Missing000000001"},
		{"source not an actor", "", GiveParams{FromUUID: ropeUUID, ToUUID: actorBob, ItemUUID: swordUUID}, ErrInvalid, "Source entity must be an Actor, got Item"},
		{"unknown target", "", GiveParams{ToUUID: "Actor.Missing000000001", ItemUUID: swordUUID}, ErrNotFound, "Target entity not found: Actor.Missing000000001"},
		{"target not an actor", "", GiveParams{ToUUID: sceneUUID, ItemUUID: swordUUID}, ErrInvalid, "Target entity must be an Actor, got Scene"},
		{"unknown item", "", GiveParams{ToUUID: actorBob, ItemUUID: "Item.Missing000000001"}, ErrNotFound, "Item not found: Item.Missing000000001"},
		{"item not an item", "", GiveParams{ToUUID: actorBob, ItemUUID: actorNone}, ErrInvalid, "Entity must be an Item, got Actor"},
		{"item of another actor", "", GiveParams{FromUUID: actorNone, ToUUID: actorBob, ItemUUID: swordUUID}, ErrInvalid, "Item " + swordUUID + " does not belong to source actor " + actorNone},
		{"unknown name on source", "", GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemName: "Bow"}, ErrNotFound, "Item not found: Bow"},
		{"source not owned", aliceID, GiveParams{FromUUID: actorBob, ToUUID: actorOwner, ItemName: "Potion"}, ErrPermission, "User 'Alice' does not have permission to give items from '" + actorBob + "'"},
		{"target not owned", aliceID, GiveParams{FromUUID: actorOwner, ToUUID: actorBob, ItemUUID: potionUUID}, ErrPermission, "User 'Alice' does not have permission to give items to '" + actorBob + "'"},
	}
	for _, tt := range errorTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tw := newTestWorld(t)
			var user *User
			if tt.user != "" {
				user = tw.user(t, tt.user)
			}
			_, err := tw.Give(ctx, user, tt.p)
			wantError(t, err, tt.kind, tt.msg)
		})
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name    string
		p       RemoveParams
		want    RemoveResult
		potions float64 // left on the actor; 0: the potion is gone
	}{
		{"part of a stack", RemoveParams{ActorUUID: actorOwner, ItemUUID: potionUUID, Quantity: 2},
			RemoveResult{ActorUUID: actorOwner, ItemUUID: potionUUID, Quantity: 1}, 1},
		{"a whole stack by name", RemoveParams{ActorUUID: actorOwner, ItemName: "POTION"},
			RemoveResult{ActorUUID: actorOwner, ItemUUID: potionUUID, Deleted: true}, 0},
		{"more than there is", RemoveParams{ActorUUID: actorOwner, ItemUUID: potionUUID, Quantity: 7},
			RemoveResult{ActorUUID: actorOwner, ItemUUID: potionUUID, Deleted: true}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tw := newTestWorld(t)
			res, err := tw.Remove(ctx, tw.user(t, aliceID), tt.p)
			if err != nil || res != tt.want {
				t.Fatalf("Remove = %+v, %v; want %+v", res, err, tt.want)
			}
			potion := itemNamed(t, tw, actorOwner, "Potion")
			if tt.potions == 0 && potion != nil || tt.potions > 0 && num(t, potion, "system.quantity") != tt.potions {
				t.Errorf("potion afterwards = %v, want %v left", potion, tt.potions)
			}
		})
	}

	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)
	_, err := tw.Remove(ctx, alice, RemoveParams{ActorUUID: actorBob, ItemName: "Potion"})
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to remove items from '"+actorBob+"'")
	_, err = tw.Remove(ctx, alice, RemoveParams{ActorUUID: actorOwner, ItemUUID: actorBob + ".Item.ItemPotion000002"})
	wantError(t, err, ErrInvalid, "Item "+actorBob+".Item.ItemPotion000002 does not belong to actor "+actorOwner)
	_, err = tw.Remove(ctx, alice, RemoveParams{ActorUUID: "Actor.Missing000000001", ItemName: "x"})
	wantError(t, err, ErrNotFound, "Target actor not found: Actor.Missing000000001")
	_, err = tw.Remove(ctx, alice, RemoveParams{ActorUUID: ropeUUID, ItemName: "x"})
	wantError(t, err, ErrInvalid, "Target entity must be an Actor, got Item")
	_, err = tw.Remove(ctx, alice, RemoveParams{ItemName: "x"})
	wantError(t, err, ErrInvalid, "'actorUuid' is required")
	_, err = tw.Remove(ctx, alice, RemoveParams{ActorUUID: actorOwner, ItemName: "x", Quantity: -2})
	wantError(t, err, ErrInvalid, "'quantity' must be a positive number")
}

func TestModifyAttribute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	alice := tw.user(t, aliceID)

	// The fifth-edition data model keeps hit points at 0 or more: a
	// decrease below 0 stops at 0, and the result says so.
	res, err := tw.ModifyAttribute(ctx, alice, actorOwner, "system.attributes.hp.value", -15)
	want := AttributeChange{UUID: actorOwner, Attribute: "system.attributes.hp.value", OldValue: 10, NewValue: 0}
	if err != nil || res != want {
		t.Errorf("decrease = %+v, %v; want %+v (stopped at 0)", res, err, want)
	}
	_, err = tw.ModifyAttribute(ctx, alice, actorObserver, "system.attributes.hp.value", 1)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to increase attribute on 'Companion'")
	_, err = tw.ModifyAttribute(ctx, alice, actorObserver, "system.attributes.hp.value", -1)
	wantError(t, err, ErrPermission, "User 'Alice' does not have permission to decrease attribute on 'Companion'")
	_, err = tw.ModifyAttribute(ctx, alice, actorOwner, "name", 1)
	wantError(t, err, ErrInvalid, "Attribute name is not a number, found: string")
	_, err = tw.ModifyAttribute(ctx, alice, actorOwner, "system.nothing", 1)
	wantError(t, err, ErrInvalid, "Attribute system.nothing is not a number, found: undefined")
	_, err = tw.ModifyAttribute(ctx, alice, actorOwner, "system.attributes", 1)
	wantError(t, err, ErrInvalid, "Attribute system.attributes is not a number, found: object")
	_, err = tw.ModifyAttribute(ctx, alice, actorOwner, "", 1)
	wantError(t, err, ErrInvalid, "'attribute' is required")
	if _, err := tw.ModifyAttribute(ctx, alice, potionUUID, "system.quantity", 2); err != nil {
		t.Errorf("increase on an embedded item: %v", err)
	}
	if q := num(t, mustGet(t, tw, potionUUID), "system.quantity"); q != 5 {
		t.Errorf("potion quantity = %v, want 5", q)
	}
}
