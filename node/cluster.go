package node

import (
	"context"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// clusterWiring joins a relay's worlds to the cluster's world registry.
// The registry, the link hub and the gRPC server need each other, and are
// built one after the other: the hooks below find the others through
// atomic pointers once they exist.
type clusterWiring struct {
	registry atomic.Pointer[cluster.Registry]
	server   atomic.Pointer[server.Server]
}

// linkHooks returns the link hub's connect and disconnect hooks: a linked
// world is hosted by the node that holds its socket. The hub must not be
// held up, so the registry is written in goroutines.
func (w *clusterWiring) linkHooks() (func(link.ConnInfo), func(string)) {
	onConnect := func(info link.ConnInfo) {
		go func() {
			if reg := w.registry.Load(); reg != nil {
				_ = reg.Claim(context.Background(), info.ClientID, world.KindLinked, info.WorldTitle, true)
			}
		}()
	}
	onDisconnect := func(clientID string) {
		go func() {
			if reg := w.registry.Load(); reg != nil {
				reg.Release(context.Background(), clientID)
			}
		}()
	}
	return onConnect, onDisconnect
}

// serve answers a call another node forwarded, once the gRPC server is
// built.
func (w *clusterWiring) serve(ctx context.Context, fc *server.ForwardedCall) *server.ForwardedReply {
	srv := w.server.Load()
	if srv == nil {
		return server.FailedReply(status.Errorf(codes.Unavailable, "World %s is unavailable: its host node is starting", fc.ClientID))
	}
	return srv.ServeForwarded(ctx, fc)
}

// startRegistry opens the cluster's world registry over the node's local
// worlds and claims its embedded worlds.
func (w *clusterWiring) startRegistry(ctx context.Context, node *cluster.Node, local cluster.LocalWorlds, host *world.Host) (*cluster.Registry, error) {
	reg, err := cluster.NewRegistry(ctx, node, cluster.RegistryOptions{Local: local, EmbeddedIDs: host.IDs, Serve: w.serve})
	if err != nil {
		return nil, err
	}
	w.registry.Store(reg)
	return reg, nil
}

// Cluster is the node's membership of a cluster; nil for a relay alone.
func (r *Node) Cluster() *cluster.Node { return r.cluster }

// Registry is the cluster's world registry as this node sees it; nil for
// a relay alone.
func (r *Node) Registry() *cluster.Registry { return r.registry }
