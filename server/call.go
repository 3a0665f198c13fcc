package server

import (
	"context"

	"google.golang.org/grpc"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
)

// Call is what the interceptors learn about one request: who calls, with
// which key, on which world, as which tabletop user. Handlers read it with
// [CallFrom].
type Call struct {
	// Method is the full gRPC method name.
	Method string
	// Policy is the method's declared access rule.
	Policy *relayv1.Policy
	// RequestID is `<operation>_<digits>`, unique across relays.
	RequestID string
	// Key is the authenticated API key.
	Key keys.Key
	// World is the resolved world; nil for worldless methods.
	World world.World
	// User is the resolved tabletop user; nil means GM-level access.
	User *world.User
	// caller is what worlds learn about the caller (the key's scopes),
	// carried in the call's context for the worlds that forward it.
	caller world.Caller
	// forwarded is set when another node forwarded the call here with the
	// key it authenticated (forward.go).
	forwarded bool
	// stream is the call's stream, for a forwarded download to answer on;
	// nil for unary calls.
	stream grpc.ServerStream
	// ticket is the stream ticket the call was authenticated with, if
	// any: an event stream binds it to itself when it opens.
	ticket *TicketUse
}

// callKey is the context key of the [Call]; an unexported type so that no
// other package can collide with it.
type callKey struct{}

// withCall returns a context carrying call.
func withCall(ctx context.Context, call *Call) context.Context {
	return world.WithCaller(context.WithValue(ctx, callKey{}, call), &call.caller)
}

// CallFrom returns the request's [Call]. Every handler runs behind the
// interceptor chain, so the call is always there; a missing one is a wiring
// bug and panics, which the recovery interceptor turns into an internal error.
func CallFrom(ctx context.Context) *Call {
	call, ok := ctx.Value(callKey{}).(*Call)
	if !ok {
		panic("server: no call in context: handler reached without the interceptor chain")
	}
	return call
}
