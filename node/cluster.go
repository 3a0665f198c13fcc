package node

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/cluster"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
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

// serveStream answers a server stream another node forwarded, once the
// gRPC server is built.
func (w *clusterWiring) serveStream(ctx context.Context, fc *server.ForwardedCall, send func([]byte) error) *server.ForwardedReply {
	srv := w.server.Load()
	if srv == nil {
		return server.FailedReply(status.Errorf(codes.Unavailable, "World %s is unavailable: its host node is starting", fc.ClientID))
	}
	return srv.ServeForwardedStream(ctx, fc, send)
}

// serveUpload answers a client stream another node forwarded, once the
// gRPC server is built.
func (w *clusterWiring) serveUpload(ctx context.Context, fc *server.ForwardedCall, next func() ([]byte, error)) *server.ForwardedReply {
	srv := w.server.Load()
	if srv == nil {
		return server.FailedReply(status.Errorf(codes.Unavailable, "World %s is unavailable: its host node is starting", fc.ClientID))
	}
	return srv.ServeForwardedUpload(ctx, fc, next)
}

// startRegistry opens the cluster's world registry over the node's local
// worlds and claims its embedded worlds.
//
// events, when the node is attached to the cluster's event bus, serves
// the event streams of worlds hosted by other nodes here: an embedded
// world's from the bus's feed of the node's hub, a linked world's from its
// feed of the node's link.Events.
func (w *clusterWiring) startRegistry(ctx context.Context, node *cluster.Node, local cluster.LocalWorlds, host *world.Host, hub *link.Hub, events func(clientID, kind string) world.Events, replication *cluster.Replication) (*cluster.Registry, error) {
	linked := func() []cluster.LinkedWorld {
		conns := hub.Connected()
		out := make([]cluster.LinkedWorld, len(conns))
		for i, c := range conns {
			out[i] = cluster.LinkedWorld{ClientID: c.ClientID, Title: c.WorldTitle}
		}
		return out
	}
	reg, err := cluster.NewRegistry(ctx, node, cluster.RegistryOptions{Local: local, EmbeddedIDs: host.IDs, Linked: linked, Serve: w.serve, ServeStream: w.serveStream, ServeUpload: w.serveUpload, Events: events, Replication: replication})
	if err != nil {
		return nil, err
	}
	w.registry.Store(reg)
	return reg, nil
}

// backfillEvents publishes, for each embedded world the node took at
// start, the events its journal holds and the cluster's events stream
// does not: those a kill (or a stop while the cluster could not take
// them) kept from being published. It runs before the node serves, so
// that no new event of the world goes out before them and the other
// nodes' subscribers see no gap. Each world is given a few seconds; one
// that fails is logged, and its subscribers elsewhere get the reset
// event for the events missed, as before.
func (r *Node) backfillEvents(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, backfillTimeout)
	defer cancel()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for _, id := range r.registry.HostedEmbedded() {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			eng, err := r.worlds.World(ctx, id)
			if err != nil {
				r.log.Warn("could not open a world to publish the events the cluster lacks", "clientId", id, "error", err)
				return
			}
			n, err := r.shared.Events.Backfill(ctx, id, eng.ReadJournal)
			switch {
			case err != nil:
				r.log.Warn("could not publish the events of a world the cluster lacks; its subscribers on other nodes will get the reset event", "clientId", id, "error", err)
			case n > 0:
				r.log.Info("published the events of a world that the cluster had not received before this node stopped", "clientId", id, "events", n)
			}
		})
	}
	wg.Wait()
}

// tookOver publishes, for an embedded world this node took over from a
// host that is gone, the events the former host journaled (the journal
// is replicated with the world) and could not publish, before the world
// serves calls here.
func (r *Node) tookOver(ctx context.Context, clientID string, eng *world.Engine) {
	if r.shared == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, backfillTimeout)
	defer cancel()
	if n, err := r.shared.Events.Backfill(ctx, clientID, eng.ReadJournal); err != nil {
		r.log.Warn("could not publish the events of a world taken over that the cluster lacks; its subscribers on other nodes will get the reset event", "clientId", clientID, "error", err)
	} else if n > 0 {
		r.log.Info("published the events of a world taken over that its former host had not published", "clientId", clientID, "events", n)
	}
}

// backfillTimeout bounds backfillEvents.
const backfillTimeout = 5 * time.Second

// Cluster is the node's membership of a cluster; nil for a relay alone.
func (r *Node) Cluster() *cluster.Node { return r.cluster }

// Registry is the cluster's world registry as this node sees it; nil for
// a relay alone.
func (r *Node) Registry() *cluster.Registry { return r.registry }

// clusterRoutes serves, on the relay's port, GET /readyz (public: may this
// node take traffic?) and GET /cluster (admin key: the cluster's status),
// and passes everything else to next.
//
// /cluster is not a route of the API's contract: it describes the
// deployment rather than a world. It still admits callers as the API
// does: the key is checked by the same admission (failed attempts count
// against the client's address) and must hold the admin scope.
func (r *Node) clusterRoutes(ids *server.RequestIDs, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch req.URL.Path {
		case "/readyz":
			r.serveReady(w, req)
		case "/cluster":
			r.serveCluster(w, req, ids.New("cluster"))
		default:
			next.ServeHTTP(w, req)
		}
	})
}

// serveReady answers 200 `{"status":"ready"}` when the node serves and,
// in a cluster, is connected to NATS; else 503 with the reason.
func (r *Node) serveReady(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeClusterJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "Method not allowed: use GET"})
		return
	}
	reason := ""
	switch {
	case r.grpc == nil || r.grpc.Health == nil:
		reason = "starting"
	case r.cluster != nil && (r.registry == nil || !r.registry.Ready()):
		reason = "not connected to the cluster"
	default:
		resp, err := r.grpc.Health.Check(req.Context(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			reason = "not serving"
		}
	}
	if reason != "" {
		writeClusterJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": reason})
		return
	}
	writeClusterJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// serveCluster answers GET /cluster with the envelope
// `{type: "cluster-result", requestId, data: cluster.Status}`.
func (r *Node) serveCluster(w http.ResponseWriter, req *http.Request, requestID string) {
	fail := func(err error) {
		st := status.Convert(err)
		writeClusterJSON(w, runtime.HTTPStatusFromCode(st.Code()), map[string]string{"type": "cluster-result", "requestId": requestID, "error": st.Message()})
	}
	if req.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		writeClusterJSON(w, http.StatusMethodNotAllowed, map[string]string{"type": "cluster-result", "requestId": requestID, "error": "Method not allowed: use GET"})
		return
	}
	apiKey := req.Header.Get(wire.APIKeyHeader)
	if err := r.grpc.Admit(req.Context(), clusterStatusMethod, server.Credentials{APIKey: apiKey, Authorization: req.Header.Get("Authorization")}, req.RemoteAddr); err != nil {
		fail(err)
		return
	}
	key, err := r.keys.Authenticate(req.Context(), apiKey)
	if err != nil {
		fail(status.Error(codes.Unauthenticated, err.Error()))
		return
	}
	if !key.HasScope(keys.ScopeAdmin) {
		fail(status.Errorf(codes.PermissionDenied, "API key lacks required scope: %s", keys.ScopeAdmin))
		return
	}
	st := cluster.Status{}
	if r.registry != nil {
		st = r.registry.Status(req.Context())
	}
	if !key.Operator() {
		// An account sees only its own worlds in the cluster's list.
		owners := worldOwners{r.links.Pairings(), r.keys}
		for i := range st.Nodes {
			st.Nodes[i].Worlds = slices.DeleteFunc(st.Nodes[i].Worlds, func(ws cluster.WorldStatus) bool {
				owner, err := owners.Owner(req.Context(), ws.ClientID)
				return err != nil || owner != key.Account()
			})
		}
	}
	writeClusterJSON(w, http.StatusOK, struct {
		Type      string         `json:"type"`
		RequestID string         `json:"requestId"`
		Data      cluster.Status `json:"data"`
	}{"cluster-result", requestID, st})
}

// clusterStatusMethod names GET /cluster for admission (it is no gRPC
// method: admission only authenticates the key and counts failures).
const clusterStatusMethod = "/relay.cluster/Status"

// writeClusterJSON writes a JSON answer.
func writeClusterJSON(w http.ResponseWriter, code int, v any) {
	body, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write(body)
}
