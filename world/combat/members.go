package combat

import (
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// resolveToken finds the token a uuid stands for: a token uuid
// (`Scene.<id>.Token.<id>`) as is, an actor uuid as that actor's first token
// on the active scene. It returns the token's uuid and document (the view's).
func resolveToken(v *world.View, uuid string) (string, world.Document, error) {
	parts := strings.Split(uuid, ".")
	switch {
	case len(parts) == 4 && parts[0] == "Scene" && parts[2] == "Token":
		token, err := v.Get(uuid)
		if err != nil {
			return "", nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
		}
		return uuid, token, nil
	case len(parts) == 2 && parts[0] == "Actor":
		if _, err := v.Get(uuid); err != nil {
			return "", nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
		}
		scene, err := v.ActiveScene()
		if err != nil {
			return "", nil, world.Errorf(world.ErrFailedPrecondition, "No active scene")
		}
		tokens, _ := scene["tokens"].([]any)
		for _, d := range tokens {
			if token := d.(map[string]any); token["actorId"] == parts[1] {
				return "Scene." + str(scene["_id"]) + ".Token." + str(token["_id"]), token, nil
			}
		}
		return "", nil, world.Errorf(world.ErrNotFound, "No token found for this actor in the current scene")
	}
	if _, err := v.Get(uuid); err != nil {
		return "", nil, world.Errorf(world.ErrNotFound, "Entity not found: %s", uuid)
	}
	return "", nil, world.Errorf(world.ErrInvalid, "Entity must be a Token or Actor")
}

// newCombatant is the combatant of a token; its `_id` comes from the
// transaction's id source.
func newCombatant(tx *world.Tx, tokenUUID string, token world.Document) world.Document {
	parts := strings.Split(tokenUUID, ".")
	actorID := str(token["actorId"])
	name, img := str(token["name"]), ""
	if texture, ok := token["texture"].(map[string]any); ok {
		img = str(texture["src"])
	}
	if actorID != "" {
		if actor, err := tx.View().Get("Actor." + actorID); err == nil {
			if name == "" {
				name = str(actor["name"])
			}
			if img == "" {
				img = str(actor["img"])
			}
		}
	}
	c := world.Document{
		"_id":        tx.NewID(),
		"tokenId":    parts[3],
		"sceneId":    parts[1],
		"actorId":    nil,
		"name":       name,
		"img":        img,
		"initiative": nil,
		"hidden":     token["hidden"] == true,
		"defeated":   false,
		"flags":      world.Document{},
	}
	if actorID != "" {
		c["actorId"] = actorID
	}
	return c
}

// requireControl checks that user may add or remove a combatant: OWNER of
// its actor, or, for a combatant without an actor, of its token. GMs may
// always.
func requireControl(v *world.View, user *world.User, c world.Document, operation string) error {
	if user.IsGM() {
		return nil
	}
	if uuid := actorUUID(c); uuid != "" {
		if _, err := v.Get(uuid); err == nil {
			return v.RequireOwner(user, uuid, operation)
		}
	}
	if uuid := tokenUUID(c); uuid != "" {
		if _, err := v.Get(uuid); err == nil {
			return v.RequireOwner(user, uuid, operation)
		}
	}
	return world.Errorf(world.ErrPermission, "User '%s' does not have permission to %s '%s'", user.Name, operation, str(c["name"]))
}

// sameToken reports whether a combatant stands for the token with the
// given uuid.
func sameToken(c world.Document, uuid string) bool { return uuid != "" && tokenUUID(c) == uuid }

// indexOfToken is the index of the combatant standing for a token, or -1.
func indexOfToken(list []any, uuid string) int {
	for i, d := range list {
		if sameToken(d.(map[string]any), uuid) {
			return i
		}
	}
	return -1
}
