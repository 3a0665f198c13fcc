package cluster

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/world"
)

// Event streams of worlds hosted by another node.
//
// With the cluster's event bus attached (RegistryOptions.Events), an event
// stream opened on a node that does not host its world is not forwarded:
// the node serves it itself from the world's events that the bus brings
// to its own hub, one consumer per world and node whatever the number of
// subscribers, with the host's event ids, filters and read rules. The
// read rules need the subscriber's tabletop user, which only the host
// knows: the remote world asks the host for it on
// relay.node.<name>.users (usersSubject). Before it follows a world's
// events, the node asks the host whether it hosts the world (the same
// subject, hdrUsersPing), so that a stream of a dead host's world is the
// 503 a unary call gets, at once. Without the bus such streams are refused
// as before, naming the host.

// hdrUsersList asks the host for every user of the world instead of one.
const hdrUsersList = "Relay-Users-List"

// hdrUsersPing asks the host only whether it hosts the world: an event
// stream opened on another node checks it before it follows the world's
// events, so that a host that is gone is a quick 503 rather than a stream
// that waits for events that do not come.
const hdrUsersPing = "Relay-Users-Ping"

// usersSubject is the subject on which a node answers questions about the
// users of the worlds it hosts.
func usersSubject(node string) string { return "relay.node." + node + ".users" }

// usersReply is the host's answer about a world's users: the users, or
// the error's kind (one of worldErrorKinds, by its text) and message.
type usersReply struct {
	Users   []world.User `json:"users,omitempty"`
	ErrKind string       `json:"errKind,omitempty"`
	ErrMsg  string       `json:"errMsg,omitempty"`
}

// worldErrorKinds are the error kinds that cross between nodes as they
// are, so that the edge answers with the host's status.
var worldErrorKinds = []error{
	world.ErrInvalid, world.ErrNotFound, world.ErrPermission, world.ErrConflict,
	world.ErrFailedPrecondition, world.ErrUnavailable, world.ErrTooLarge,
	world.ErrTimeout, world.ErrUnimplemented,
}

// Answer lets the node answer the other nodes' questions about its
// worlds (their users, whether it hosts them), which their event streams
// of these worlds wait for: call it once the node has published the
// events its journals hold and the events stream lacks (the cluster's
// event bus, Backfill), so that no stream elsewhere starts before them.
// Until then such questions are answered Unavailable: the node is
// starting.
func (r *Registry) Answer() { r.answering.Store(true) }

// answerUsers answers one question about a world's users: the user the
// message's data names, or every user with hdrUsersList. Only a world this
// node hosts is answered: a node never asks another on behalf of a third.
func (r *Registry) answerUsers(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), r.node.cfg.ForwardTimeout)
	defer cancel()
	clientID := m.Header.Get(hdrClientID)
	var rep usersReply
	var w world.World
	err := world.Errorf(world.ErrUnavailable, "World %s is unavailable: its host node %s is starting", clientID, r.node.Name())
	if !r.signed(m) {
		err = world.Errorf(world.ErrPermission, "The question was refused: only the nodes of the cluster, which know its secret, may ask about a world's users")
	} else if r.answering.Load() {
		w, err = r.World(ctx, clientID)
	}
	if err == nil {
		if _, remote := w.(*remoteWorld); remote {
			err = world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s does not host it", clientID, r.node.Name())
		}
	}
	if err == nil {
		switch {
		case m.Header.Get(hdrUsersPing) != "":
			// The world is hosted here: that is the whole answer.
		case m.Header.Get(hdrUsersList) != "":
			rep.Users, err = w.Users(ctx)
		default:
			var u *world.User
			if u, err = w.ResolveUser(ctx, string(m.Data)); err == nil && u != nil {
				rep.Users = []world.User{*u}
			}
		}
	}
	if err != nil {
		rep.Users, rep.ErrMsg = nil, err.Error()
		for _, kind := range worldErrorKinds {
			if errors.Is(err, kind) {
				rep.ErrKind = kind.Error()
				break
			}
		}
	}
	out := nats.NewMsg(m.Reply)
	out.Data, _ = json.Marshal(rep)
	r.node.signer.signAnswer(out, 0)
	_ = m.RespondMsg(out)
}

// Questions askUsers puts to a world's host.
const (
	askUser  = iota // the user the name names
	askList         // every user of the world
	askAlive        // whether it hosts the world (no users)
)

// askUsers asks the world's host about the world's users: the user named
// name, every user, or only whether it hosts the world (ask is one of
// askUser, askList and askAlive). A host that is gone is Unavailable
// naming the world, at once when NATS knows that nothing answers, and
// within the forward time-out at the latest.
func (w *remoteWorld) askUsers(ctx context.Context, name string, ask int) ([]world.User, error) {
	timeout := w.reg.node.cfg.ForwardTimeout
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	msg := nats.NewMsg(usersSubject(w.entry.Node))
	msg.Header.Set(hdrClientID, w.id)
	switch ask {
	case askList:
		msg.Header.Set(hdrUsersList, "1")
	case askAlive:
		msg.Header.Set(hdrUsersPing, "1")
	}
	msg.Data = []byte(name)
	res, err := w.reg.node.request(actx, msg)
	if err != nil {
		return nil, w.forwardError(ctx, err, timeout)
	}
	var rep usersReply
	if err := json.Unmarshal(res.Data, &rep); err != nil {
		return nil, world.Errorf(world.ErrUnavailable, "World %s is unavailable: node %s answered about its users in a way this node does not read", w.id, w.entry.Node)
	}
	if rep.ErrMsg != "" {
		for _, kind := range worldErrorKinds {
			if kind.Error() == rep.ErrKind {
				return nil, world.Errorf(kind, "%s", rep.ErrMsg)
			}
		}
		return nil, errors.New(rep.ErrMsg)
	}
	return rep.Users, nil
}

// ResolveUser asks the host for the user, when this node serves the
// world's event streams (the only calls that reach it here); otherwise it
// is unavailable (see errNotForwarded).
func (w *remoteWorld) ResolveUser(ctx context.Context, name string) (*world.User, error) {
	if w.reg.opts.Events == nil {
		return nil, w.errNotForwarded()
	}
	users, err := w.askUsers(ctx, name, askUser)
	if err != nil {
		return nil, err
	}
	if len(users) != 1 {
		return nil, world.Errorf(world.ErrNotFound, "User not found: '%s'", name)
	}
	return &users[0], nil
}

// Users asks the host for the world's users, as ResolveUser does.
func (w *remoteWorld) Users(ctx context.Context) ([]world.User, error) {
	if w.reg.opts.Events == nil {
		return nil, w.errNotForwarded()
	}
	return w.askUsers(ctx, "", askList)
}

var (
	_ server.StreamingRemote = (*remoteWorld)(nil)
	_ world.Events           = (*remoteWorld)(nil)
)

// ServesStream implements server.StreamingRemote: with the event bus
// attached, the event streams are served on this node.
func (w *remoteWorld) ServesStream(method string) bool {
	return w.reg.opts.Events != nil && server.IsEventStream(method)
}

// Subscribe implements world.Events through the event bus: the world's
// events, fed to this node's hub by its one consumer of them.
func (w *remoteWorld) Subscribe(ctx context.Context, user *world.User, req world.EventRequest) (world.EventSubscription, error) {
	if w.reg.opts.Events == nil {
		return nil, w.errNotForwarded()
	}
	// The events come from the events stream, not from the host; but a
	// stream of a world whose host is gone would only wait for events
	// that do not come (and for the events stream's own recovery when
	// the host took part in it): such a stream is refused with the
	// answer a unary call gets.
	if _, err := w.askUsers(ctx, "", askAlive); err != nil {
		return nil, err
	}
	return w.reg.opts.Events(w.id, w.entry.Kind).Subscribe(ctx, user, req)
}
