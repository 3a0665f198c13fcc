package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/demo"
)

// embeddedWorlds makes and removes the node's embedded worlds for the
// world service (server.EmbeddedWorlds). A world made by an account other
// than the operator's is recorded as that account's in the key store,
// which every node of a cluster shares, before it is made; the operator's
// worlds need no record.
type embeddedWorlds struct{ r *Node }

var _ server.EmbeddedWorlds = embeddedWorlds{}

// emptySeed is the seed of a world made empty: one game master user.
func emptySeed(title string) world.Seed {
	return world.Seed{
		Title:  title,
		System: "dnd5e",
		Users: []world.Document{
			{"_id": "gamemaster000001", "name": "Gamemaster", "role": float64(world.RoleGamemaster)},
		},
	}
}

func (e embeddedWorlds) CreateWorld(ctx context.Context, account, clientID, title, seedName string) (world.Info, error) {
	r := e.r
	// A linked world's id is never taken by an embedded one.
	if _, err := r.links.Pairings().World(ctx, clientID); err == nil {
		return world.Info{}, world.Errorf(world.ErrConflict, "World already exists: %s", clientID)
	} else if !errors.Is(err, link.ErrUnknownWorld) {
		return world.Info{}, err
	}
	var seed world.Seed
	switch seedName {
	case server.SeedDemo:
		s, err := demo.Seed()
		if err != nil {
			return world.Info{}, err
		}
		seed = s
		seed.Title = title
	default:
		seed = emptySeed(title)
	}
	claimed := false
	if account != keys.OperatorAccount {
		if _, owned := r.keys.WorldOwner(clientID); owned {
			return world.Info{}, world.Errorf(world.ErrConflict, "World already exists: %s", clientID)
		}
		if err := r.keys.ClaimWorld(ctx, clientID, account); err != nil {
			if errors.Is(err, keys.ErrWorldClaimed) {
				return world.Info{}, world.Errorf(world.ErrConflict, "World already exists: %s", clientID)
			}
			return world.Info{}, err
		}
		claimed = true
	}
	eng, err := r.worlds.Create(ctx, clientID, seed)
	if err != nil {
		if claimed {
			// The world was not made: the id is free again.
			_ = r.keys.ReleaseWorld(context.WithoutCancel(ctx), clientID)
		}
		return world.Info{}, err
	}
	if seedName == server.SeedDemo {
		filesDir := filepath.Join(r.dataDir, "worlds", clientID, "files")
		if err := copyFS(filesDir, demo.Files()); err != nil {
			return world.Info{}, fmt.Errorf("write the demo files of world %s: %w", clientID, err)
		}
	}
	r.log.Info("made an embedded world", "clientId", clientID, "account", account, "seed", seedName)
	return eng.Info(), nil
}

func (e embeddedWorlds) DeleteWorld(ctx context.Context, clientID string) error {
	r := e.r
	if _, err := r.links.Pairings().World(ctx, clientID); err == nil {
		return world.Errorf(world.ErrInvalid, "World %s is a linked world: unpair it with DELETE /linked-worlds/%s", clientID, clientID)
	}
	if err := r.worlds.Delete(ctx, clientID); err != nil {
		return err
	}
	// In a cluster the world leaves the registry, and its replicated log
	// goes: its followers stop and remove their copies, and no node can
	// take it over and bring it back.
	if r.registry != nil {
		if err := r.registry.Forget(context.WithoutCancel(ctx), clientID); err != nil {
			return err
		}
	}
	if r.replication != nil {
		if err := r.replication.Forget(context.WithoutCancel(ctx), clientID); err != nil {
			return err
		}
	}
	// Its kept events and open streams go with it; a world made later
	// under the same id starts afresh.
	r.hub.Forget(clientID)
	if r.shared != nil && r.shared.Events != nil {
		// So do its events in the cluster's events stream.
		r.shared.Events.Forget(clientID)
	}
	if err := r.keys.ReleaseWorld(context.WithoutCancel(ctx), clientID); err != nil {
		return err
	}
	r.log.Info("removed an embedded world", "clientId", clientID)
	return nil
}

func (e embeddedWorlds) CountWorlds(ctx context.Context, account string) (int64, error) {
	r := e.r
	var n int64
	if account == keys.OperatorAccount {
		ids, err := r.worlds.IDs(ctx)
		if err != nil {
			return 0, err
		}
		for _, id := range ids {
			if _, owned := r.keys.WorldOwner(id); !owned {
				n++
			}
		}
	} else {
		n = int64(len(r.keys.OwnedWorlds(account)))
	}
	recs, err := r.links.Pairings().Worlds(ctx)
	if err != nil {
		return 0, err
	}
	for _, w := range recs {
		if linkAccount(account) == w.Account && w.Paired() {
			n++
		}
	}
	return n, nil
}

func (e embeddedWorlds) StoredBytes(ctx context.Context, account string) int64 {
	r := e.r
	var ids []string
	if account == keys.OperatorAccount {
		all, _ := r.worlds.IDs(ctx)
		for _, id := range all {
			if _, owned := r.keys.WorldOwner(id); !owned {
				ids = append(ids, id)
			}
		}
	} else {
		ids = r.keys.OwnedWorlds(account)
	}
	var total int64
	for _, id := range ids {
		total += r.worlds.DiskBytes(id)
	}
	return total
}

func (e embeddedWorlds) Holds(ctx context.Context, clientID string) bool {
	ids, err := e.r.worlds.IDs(ctx)
	return err == nil && slices.Contains(ids, clientID)
}

func (e embeddedWorlds) DatabaseBytes(clientID string) int64 {
	return e.r.worlds.DatabaseBytes(clientID)
}

// releaseEmbedded removes the embedded worlds of an account that is being
// deleted.
func (r *Node) releaseEmbedded(ctx context.Context, accountID string) error {
	for _, id := range r.keys.OwnedWorlds(accountID) {
		err := embeddedWorlds{r}.DeleteWorld(ctx, id)
		var werr *world.Error
		if errors.As(err, &werr) && werr.Kind == world.ErrNotFound {
			// Held by another node, or gone already: its record goes.
			err = r.keys.ReleaseWorld(ctx, id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
