package cluster

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// Calls around a failure.
//
// A call forwarded to a host that dies must not wait out the forward
// time-out. While a forwarded call is under way for longer than
// watchAfter, the edge asks the host every watchEvery whether it is
// there (relay.node.<name>.ping): once NATS knows no one answers there
// (the host's connection or server is gone, which NATS learns when the
// route drops), or the world's registry entry names another host and the
// host does not answer, the host is taken for dead. A read is then sent again to the
// world's new host once one serves it (a follower that takes the world
// over); a write is answered with a 503 saying that its outcome is
// unknown, since the host may have applied it before it died.

// pingSubject is the subject on which a node says it is there.
func pingSubject(node string) string { return "relay.node." + node + ".ping" }

// How the edge watches the host of a call under way. A ping sent while
// the route to a host that just died is still closing goes unanswered
// rather than meeting no responders: watchPing bounds the wait for it, so
// that the next ping, which finds no one, follows soon.
const (
	watchAfter = 250 * time.Millisecond
	watchEvery = 250 * time.Millisecond
	watchPing  = 500 * time.Millisecond
)

// errHostGone ends a forwarded call whose host is taken for dead.
var errHostGone = errors.New("the host node is gone")

// answerPings answers the other nodes' pings until the node closes: unlike
// the forwarded calls, also while the node stops, so that calls it still
// answers are not taken for lost.
func (r *Registry) answerPings() error {
	signer := r.node.signer
	sub, err := r.node.nc.Subscribe(pingSubject(r.node.Name()), func(m *nats.Msg) {
		if r.holdRenewals.Load() {
			// A test's paused process answers nothing.
			return
		}
		if signer.verify(m) != nil {
			// Not a node of the cluster: no answer, so that no one
			// learns from this node's pings more than NATS tells.
			signer.refused[refusedPing].Add(1)
			return
		}
		reply := nats.NewMsg(m.Reply)
		signer.signAnswer(reply, 0)
		_ = m.RespondMsg(reply)
	})
	if err != nil {
		return err
	}
	r.node.OnClose(func() { _ = sub.Unsubscribe() })
	return nil
}

// watchHost cancels ctx with errHostGone once the host of w is taken for
// dead, and returns a function that stops watching.
func (w *remoteWorld) watchHost(ctx context.Context, cancel context.CancelCauseFunc) func() {
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTimer(watchAfter)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if w.hostGone(ctx) {
				cancel(errHostGone)
				return
			}
			t.Reset(watchEvery)
		}
	}()
	return func() { once.Do(func() { close(done) }) }
}

// hostGone reports whether the host of w is taken for dead: NATS knows no
// one answering its pings, or the registry gives the world to another node
// and the host does not answer a ping within watchPing (a paused process).
// A lease that merely looks lapsed proves nothing (this node's view of the
// registry may lag), nor does a release: a stopping host answers its pings
// and the calls under way before it leaves.
func (w *remoteWorld) hostGone(ctx context.Context) bool {
	r := w.reg
	r.mu.RLock()
	e, known := r.entries[w.id]
	r.mu.RUnlock()
	moved := !known || e.Node != w.entry.Node
	pctx, cancel := context.WithTimeout(ctx, watchPing)
	defer cancel()
	err := r.ping(pctx, w.entry.Node)
	return errors.Is(err, nats.ErrNoResponders) || moved && err != nil && ctx.Err() == nil
}

// ping asks node whether it is there: a signed question, and an answer
// that only counts when its signature is valid (with a cluster secret), so
// that a client of the NATS account that is not a node cannot answer for
// a node that is gone.
func (r *Registry) ping(ctx context.Context, node string) error {
	_, err := r.node.request(ctx, nats.NewMsg(pingSubject(node)))
	return err
}

// afterHostLoss answers a call whose host was taken for dead: with
// underway, while the host may have been running it. A read, or a call
// the host never took, goes to the world's new host once one serves it
// (a replicated embedded world's follower takes it over), within the
// caller's deadline and the forward time-out; a write under way is a 503
// saying that its outcome is unknown. Without replication no other node
// will serve the world: the call is a 503 at once.
func (w *remoteWorld) afterHostLoss(ctx context.Context, fc *server.ForwardedCall, underway bool) (*server.ForwardedReply, error) {
	if underway && !readOnlyMethod(fc.Method) {
		return nil, status.Errorf(codes.Unavailable, "World %s: its host node %s was lost while the write was under way, so whether it was applied is unknown: read the world before trying again", w.id, w.entry.Node)
	}
	r := w.reg
	if r.opts.Replication == nil || w.entry.Kind != world.KindEmbedded {
		return nil, status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s was lost", w.id, w.entry.Node)
	}
	wait, cancel := context.WithTimeout(ctx, r.node.cfg.ForwardTimeout)
	defer cancel()
	for {
		r.mu.RLock()
		e, known := r.entries[w.id]
		r.mu.RUnlock()
		switch {
		case r.holds(w.id) && !r.isTakingOver(w.id) && r.opts.Serve != nil:
			// This node took the world over: serve the read here.
			return r.opts.Serve(ctx, fc), nil
		case known && e.Node != w.entry.Node && e.Node != r.node.Name() && e.live(r.ttl):
			return r.remote(w.id, e.Entry).Forward(ctx, fc)
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if !underway {
				return nil, status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s was lost, and no other node serves it yet; the call was not carried out: try again", w.id, w.entry.Node)
			}
			return nil, status.Errorf(codes.Unavailable, "World %s is unavailable: its host node %s was lost, and no other node serves it yet", w.id, w.entry.Node)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readOnlyMethods caches readOnlyMethod's answers.
var readOnlyMethods sync.Map

// readOnlyMethod reports whether a gRPC method (/package.Service/Method)
// only reads: its REST binding is a GET. Such a call may be sent again
// to another node without changing anything twice.
func readOnlyMethod(fullMethod string) bool {
	if v, ok := readOnlyMethods.Load(fullMethod); ok {
		return v.(bool)
	}
	ro := false
	name := strings.TrimPrefix(fullMethod, "/")
	if i := strings.LastIndex(name, "/"); i > 0 {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name[:i]))
		if sd, ok := d.(protoreflect.ServiceDescriptor); err == nil && ok {
			if md := sd.Methods().ByName(protoreflect.Name(name[i+1:])); md != nil {
				if rule, ok := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule); ok && rule != nil {
					ro = rule.GetGet() != ""
				}
			}
		}
	}
	readOnlyMethods.Store(fullMethod, ro)
	return ro
}
