package link

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// Worlds resolves client ids to worlds: what the relay's services need of
// a registry (server.Worlds), and what [Registry] composes.
type Worlds interface {
	// World returns the world serving clientID; an unknown one is
	// world.ErrNotFound.
	World(ctx context.Context, clientID string) (world.World, error)
	// List describes every world.
	List(ctx context.Context) ([]world.Info, error)
	// IDs lists the worlds' client ids.
	IDs(ctx context.Context) ([]string, error)
}

// Registry resolves a client id to the relay's own (embedded) world of
// that id, else to the paired linked world of that id. A linked world that
// is not connected fails at once with ErrNotConnected (503 `world <id> is
// not connected`), so that no call waits for a tabletop that is not there;
// an id that names neither kind is the embedded registry's ErrNotFound.
// It is safe for concurrent use.
type Registry struct {
	local  Worlds
	svc    *Service
	events *Events
	// linked keeps each linked world's *Linked, by client id; they hold
	// nothing but the id, so they are never dropped.
	linked sync.Map
}

// NewRegistry returns the registry of local's worlds and svc's linked
// worlds; the linked worlds stream their events from events (none when
// nil).
func NewRegistry(local Worlds, svc *Service, events *Events) *Registry {
	return &Registry{local: local, svc: svc, events: events}
}

// World implements [Worlds].
func (r *Registry) World(ctx context.Context, clientID string) (world.World, error) {
	w, err := r.local.World(ctx, clientID)
	if err == nil || !errors.Is(err, world.ErrNotFound) {
		return w, err
	}
	// A linked world resolved before and still connected is still paired
	// (unpairing closes its connection): no need to read the store.
	if lw, ok := r.linked.Load(clientID); ok && r.svc.hub.Online(clientID) {
		return lw.(*Linked).Resolved(), nil
	}
	rec, lerr := r.svc.pairings.World(ctx, clientID)
	if lerr != nil || !rec.Paired() {
		// Unknown here too: the embedded registry's answer stands.
		return nil, err
	}
	if !r.svc.hub.Online(clientID) {
		return nil, newCallError(ErrNotConnected, clientID, "", "")
	}
	return r.linkedWorld(rec).Resolved(), nil
}

// linkedWorld returns the linked world of a pairing record.
func (r *Registry) linkedWorld(rec World) *Linked {
	if w, ok := r.linked.Load(rec.ClientID); ok {
		return w.(*Linked)
	}
	w, _ := r.linked.LoadOrStore(rec.ClientID, NewLinked(r.svc.hub, rec.ClientID, world.Info{Title: rec.WorldTitle}).WithEvents(r.events))
	return w.(*Linked)
}

// List implements [Worlds]: the embedded worlds, then the paired linked
// worlds, by client id, each described for GET /clients.
func (r *Registry) List(ctx context.Context) ([]world.Info, error) {
	infos, err := r.local.List(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := r.svc.pairings.Worlds(ctx)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if !rec.Paired() {
			continue
		}
		infos = append(infos, r.describe(rec))
	}
	slices.SortFunc(infos, func(a, b world.Info) int { return cmp.Compare(a.ClientID, b.ClientID) })
	return infos, nil
}

// describe describes a linked world: from its live connection when it has
// one, else from its pairing record.
func (r *Registry) describe(rec World) world.Info {
	info := world.Info{ClientID: rec.ClientID, Kind: world.KindLinked, Title: rec.WorldTitle, WorldID: rec.WorldID, Name: rec.WorldTitle}
	if ci, ok := r.svc.hub.Info(rec.ClientID); ok {
		info.Online = true
		info.Title = cmp.Or(ci.WorldTitle, info.Title)
		info.WorldID = cmp.Or(ci.WorldID, info.WorldID)
		info.Name = cmp.Or(ci.CustomName, info.Title)
		info.System, info.SystemVersion, info.TabletopVersion = ci.SystemID, ci.SystemVersion, ci.FoundryVersion
		info.ConnectedAt = ci.ConnectedAt
	}
	if seen, ok := r.svc.hub.LastSeen(rec.ClientID); ok {
		info.LastSeen = seen
	}
	return info
}

// IDs implements [Worlds]: the embedded worlds' ids, then the paired
// linked worlds'.
func (r *Registry) IDs(ctx context.Context) ([]string, error) {
	ids, err := r.local.IDs(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := r.svc.pairings.Worlds(ctx)
	if err != nil {
		return nil, err
	}
	for _, rec := range recs {
		if rec.Paired() {
			ids = append(ids, rec.ClientID)
		}
	}
	return ids, nil
}
