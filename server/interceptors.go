package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/audit"
	"github.com/tabletop-relay/relay/observe"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// Authenticator turns an API key into its record.
type Authenticator interface {
	Authenticate(ctx context.Context, plaintext string) (keys.Key, error)
}

// Worlds is the registry of worlds: it resolves a client id to the world
// that serves it, whatever its kind (the relay's own are world/embedded's
// Registry).
type Worlds interface {
	// World returns the world serving clientID; an unknown one is
	// ErrNotFound.
	World(ctx context.Context, clientID string) (world.World, error)
	// List describes every world.
	List(ctx context.Context) ([]world.Info, error)
	// IDs lists the worlds' client ids, cheaply: a call that names no
	// world asks for it to find the only one.
	IDs(ctx context.Context) ([]string, error)
}

// Chain is the interceptor chain every RPC passes through, for REST callers
// (through the gateway) and gRPC callers alike. The order, outermost first:
//
//  1. recovery: a panic becomes an internal error and is logged with its stack;
//  2. request id: the method's policy is looked up and `<operation>_<digits>`
//     is issued and sent back in header and trailer metadata;
//  3. logging: one line per call with its outcome and duration;
//     audit: the calls of the audited methods (accounts, keys, pairing)
//     are recorded in the audit log with their final status (audit.go);
//  4. error mapping: world and key errors become gRPC statuses (errors.go);
//  5. authentication: `x-api-key` → key record;
//  6. rate limit: the key spends a token of its bucket (ratelimit.go; off
//     when RateLimit is nil), and then its account one of the account's
//     (accountquota.go; off for an account without a limit); a stream
//     spends one when it is opened;
//  7. scope: the key must hold the policy's scope; a method without a policy
//     is refused (fail closed);
//  8. world resolution: `clientId`, or the key's only world, or the relay's
//     only world; a key bound to worlds can reach only those;
//     forwarding: in a cluster, a unary call for a world another node
//     hosts goes to that node, which runs the steps from here on and
//     answers (forward.go);
//  9. user resolution: the key's injected user, or `userId`, by id then by
//     case-insensitive name; no user means GM-level access;
//  10. policy: GM-only methods and world permissions (FILES_BROWSE, ...);
//  11. parameters: a REST call whose parameters the gateway could not read
//     is refused here (see refuseInvalidParams), so that its 400 comes
//     after the 401, 403 and 404 of the steps before, as for a call whose
//     parameters are fine;
//  12. stored bytes: a unary call that may make an embedded world hold
//     more is refused when the world's account is at its quota of stored
//     bytes (accountquota.go; uploads check it in the file service).
//
// Steps 8 to 10 need the request message; on streams they run when the
// handler receives the first message. Document permissions are decided later,
// in the world, with the resolved user.
type Chain struct {
	Policies   Policies
	Keys       Authenticator
	Worlds     Worlds
	RequestIDs *RequestIDs
	Log        *slog.Logger
	// Tickets, when set, lets the event streams authenticate with a stream
	// ticket instead of an API key (see tickets.go).
	Tickets *Tickets
	// RateLimit limits each key's requests; nil allows everything.
	RateLimit *RateLimiter
	// Metrics counts the gRPC-native calls; nil counts nothing.
	Metrics *observe.Metrics
	// Accounts refuses the keys of suspended accounts that reach the
	// chain without Keys.Authenticate (stream tickets, forwarded calls);
	// nil refuses none.
	Accounts interface{ Suspension(accountID string) error }
	// Owners tells which account owns each world; nil means the
	// operator's account owns every world.
	Owners WorldOwners
	// Quotas applies each account's limit of requests a minute; nil
	// limits no account.
	Quotas *quotaPolicy
	// Audit records the calls of the audited methods; nil records none.
	Audit audit.Recorder
	// idempotency serves the writes that carry an idempotency key
	// (idempotency.go); nil ignores the key.
	idempotency *idempotency
}

// WorldOwners tells which account owns a world. Keys of the operator's
// account reach every world; the keys of any other account only the
// worlds their account owns, and every other world is answered to them
// exactly as a world that does not exist.
type WorldOwners interface {
	// Owner returns the id of the account that owns the world clientID,
	// whether or not the world exists (the operator's for an unknown one).
	Owner(ctx context.Context, clientID string) (string, error)
}

// reaches reports whether key may see the world clientID at all: it is
// the operator's, or its account owns the world.
func (c *Chain) reaches(ctx context.Context, key keys.Key, clientID string) (bool, error) {
	if key.Operator() {
		return true, nil
	}
	owner := keys.OperatorAccount
	if c.Owners != nil {
		o, err := c.Owners.Owner(ctx, clientID)
		if err != nil {
			return false, err
		}
		owner = o
	}
	return owner == key.Account(), nil
}

// UnknownWorld is the answer for a world that does not exist, and for
// another account's world.
func UnknownWorld(clientID string) error {
	return world.Errorf(world.ErrNotFound, "Unknown world: %s", clientID)
}

// Unary returns the unary interceptors in chain order (first is outermost),
// for grpc.ChainUnaryInterceptor.
func (c *Chain) Unary() []grpc.UnaryServerInterceptor {
	return []grpc.UnaryServerInterceptor{
		c.recoverUnary,
		c.requestIDUnary,
		c.logUnary,
		c.auditUnary,
		c.errorsUnary,
		// The steps run as one interceptor: the same order and the same
		// effect as one interceptor each, without a handler closure per
		// step and call. A call for a world that another node hosts
		// leaves for that node after world resolution (forward.go).
		c.unaryStepsForwarding(
			[]step{c.authenticate, c.rateLimit, c.accountRateLimit, c.checkScope, c.resolveWorld},
			[]step{c.resolveUser, c.checkPolicy, refuseInvalidParams, c.checkStoredBytes},
		),
	}
}

// Stream returns the stream interceptors in chain order (first is
// outermost), for grpc.ChainStreamInterceptor.
func (c *Chain) Stream() []grpc.StreamServerInterceptor {
	return []grpc.StreamServerInterceptor{
		c.recoverStream,
		c.requestIDStream,
		c.logStream,
		c.errorsStream,
		streamStep(c.authenticate, false),
		streamStep(c.rateLimit, false),
		streamStep(c.accountRateLimit, false),
		streamStep(c.checkScope, false),
		streamStep(c.resolveWorld, true),
		streamStep(c.forwardStream, true),
		streamStep(c.resolveUser, true),
		streamStep(c.checkPolicy, true),
		streamStep(refuseInvalidParams, true),
	}
}

// refuseInvalidParams is the chain's last step: the parameter error the
// gateway deferred, if any, as InvalidArgument (400). The gateway defers the
// error of a REST call whose parameters it could not read (in
// wire.InvalidParamsHeader) and still makes the call, with only the
// parameters that choose the world and the user, so that the earlier steps
// of the chain answer first (an unknown world is 404 whatever else is
// wrong). A gRPC caller that sends the header only refuses its own call.
func refuseInvalidParams(ctx context.Context, _ *Call, _ any) error {
	if v := metadata.ValueFromIncomingContext(ctx, wire.InvalidParamsHeader); len(v) > 0 {
		return status.Error(codes.InvalidArgument, v[0])
	}
	return nil
}

// isPublic reports whether a method is served without an API key: the
// standard health and reflection services.
func isPublic(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.Health/") ||
		strings.HasPrefix(method, "/grpc.reflection.")
}

func (c *Chain) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer c.recoverInto(ctx, info.FullMethod, &err)
	return handler(ctx, req)
}

func (c *Chain) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	defer c.recoverInto(ss.Context(), info.FullMethod, &err)
	return handler(srv, ss)
}

// recoverInto turns a panic into an internal error.
func (c *Chain) recoverInto(ctx context.Context, method string, err *error) {
	if r := recover(); r != nil {
		c.Log.ErrorContext(ctx, "panic in handler", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		*err = status.Error(codes.Internal, "Internal error")
	}
}

// newCall starts the request's [Call] and issues its request id.
func (c *Chain) newCall(method string) *Call {
	policy := c.Policies[method]
	op := "unknown"
	if policy != nil {
		op = policy.GetOperation()
	}
	return &Call{Method: method, Policy: policy, RequestID: c.RequestIDs.New(op)}
}

func (c *Chain) requestIDUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var call *Call
	if fc := forwardedFrom(ctx); fc != nil {
		// A call forwarded by another node keeps the id that node issued
		// and sent its caller.
		call = &Call{Method: info.FullMethod, Policy: c.Policies[info.FullMethod], RequestID: fc.RequestID, forwarded: true}
	} else {
		call = c.newCall(info.FullMethod)
	}
	// The header's name is in lower case already: the metadata is built
	// directly rather than through metadata.Pairs, which copies it.
	md := metadata.MD{wire.RequestIDHeader: {call.RequestID}}
	_ = grpc.SetHeader(ctx, md)
	_ = grpc.SetTrailer(ctx, md)
	return handler(withCall(ctx, call), req)
}

func (c *Chain) requestIDStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	var call *Call
	if fc := forwardedFrom(ss.Context()); fc != nil {
		call = &Call{Method: info.FullMethod, Policy: c.Policies[info.FullMethod], RequestID: fc.RequestID, forwarded: true}
	} else {
		call = c.newCall(info.FullMethod)
	}
	if rec := observe.RecordFrom(ss.Context()); rec != nil {
		rec.SetStart(call.Method, call.RequestID)
	}
	md := metadata.Pairs(wire.RequestIDHeader, call.RequestID)
	_ = ss.SetHeader(md)
	ss.SetTrailer(md)
	cs := &contextStream{ServerStream: ss, ctx: withCall(ss.Context(), call)}
	// A forwarded download sends the host's messages on it (forward.go).
	call.stream = cs
	return handler(srv, cs)
}

func (c *Chain) logUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	c.logCall(ctx, start, err)
	return resp, err
}

func (c *Chain) logStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	err := handler(srv, ss)
	c.logCall(ss.Context(), start, err)
	return err
}

// logCall writes one line for a finished call. It never logs the API key,
// only the key's id.
//
// A call made for an HTTP request (REST and SSE, through the gateway) is
// not logged here: its details go into the request's observe.Record, and
// the HTTP access line, written once the answer is sent, carries them
// (one line per request). gRPC-native calls are logged here and counted
// in the metrics.
func (c *Chain) logCall(ctx context.Context, start time.Time, err error) {
	call := CallFrom(ctx)
	code := status.Code(err)
	if rec := observe.RecordFrom(ctx); rec != nil {
		var world, user, msg string
		if call.World != nil {
			world = call.World.Info().ClientID
		}
		if call.User != nil {
			user = call.User.Name
		}
		if err != nil {
			msg = status.Convert(err).Message()
		}
		rec.SetCall(call.Method, code.String(), call.RequestID, call.Key.ID, world, user, msg)
		return
	}
	c.Metrics.ObserveRPC(call.Method, code, time.Since(start))
	level := slog.LevelInfo
	if code == codes.Internal || code == codes.Unknown {
		level = slog.LevelError
	}
	if !c.Log.Enabled(ctx, level) {
		return
	}
	// The record is built by hand, without the caller's program counter
	// that Logger methods look up, and its attributes are added one by
	// one into the record's own room: this line is written for every call.
	r := slog.NewRecord(time.Now(), level, "rpc", 0)
	r.AddAttrs(
		slog.String("method", call.Method),
		slog.String("requestId", call.RequestID),
		slog.String("code", code.String()),
		slog.Float64("durationMs", observe.Milliseconds(time.Since(start))),
	)
	if call.Key.ID != "" {
		r.AddAttrs(slog.String("keyId", call.Key.ID))
	}
	if call.World != nil {
		r.AddAttrs(slog.String("clientId", call.World.Info().ClientID))
	}
	if call.User != nil {
		r.AddAttrs(slog.String("user", call.User.Name))
	}
	if err != nil {
		r.AddAttrs(slog.String("error", status.Convert(err).Message()))
	}
	_ = c.Log.Handler().Handle(ctx, r)
}

func (c *Chain) errorsUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	if err != nil {
		return nil, toStatus(ctx, c.Log, err)
	}
	return resp, nil
}

func (c *Chain) errorsStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	err := handler(srv, ss)
	if errors.Is(err, errStreamForwarded) {
		return nil // the host answered, whole (forward.go)
	}
	return toStatus(ss.Context(), c.Log, err)
}

// authenticate resolves the API key to its record.
func (c *Chain) authenticate(ctx context.Context, call *Call, _ any) error {
	if isPublic(call.Method) {
		return nil
	}
	if call.forwarded {
		// The edge node authenticated the key (forward.go).
		call.Key = forwardedFrom(ctx).Key
		call.caller.Scopes = call.Key.Scopes
		// The account may have been suspended since: this node's own
		// view of the accounts decides.
		return c.refuseSuspended(ctx, call.Key)
	}
	// ValueFromIncomingContext reads one key without copying the whole
	// metadata, as FromIncomingContext does.
	var plaintext string
	if v := metadata.ValueFromIncomingContext(ctx, wire.APIKeyHeader); len(v) > 0 {
		plaintext = v[0]
	}
	if plaintext == "" {
		// Browsers cannot send headers on an event stream: the four
		// subscribe methods also accept a stream ticket, which stands for
		// the key that asked for it. The stream binds the ticket to itself
		// when it opens (eventService.serve).
		if ticket := metadata.ValueFromIncomingContext(ctx, wire.StreamTicketHeader); c.Tickets != nil && acceptsTicket(call.Method) && len(ticket) > 0 {
			key, use, err := c.Tickets.Redeem(ctx, ticket[0])
			if err != nil {
				return err
			}
			if err := c.refuseSuspended(ctx, key); err != nil {
				return err
			}
			call.Key, call.ticket = key, use
			call.caller.Scopes = key.Scopes
			return nil
		}
		var authorization string
		if v := metadata.ValueFromIncomingContext(ctx, "authorization"); len(v) > 0 {
			authorization = v[0]
		}
		return missingKey(authorization)
	}
	key, err := c.Keys.Authenticate(ctx, plaintext)
	if err != nil {
		return toStatus(ctx, c.Log, err)
	}
	call.Key = key
	call.caller.Scopes = key.Scopes
	return nil
}

// refuseSuspended refuses a key whose account is suspended.
func (c *Chain) refuseSuspended(ctx context.Context, key keys.Key) error {
	if c.Accounts == nil {
		return nil
	}
	if err := c.Accounts.Suspension(key.Account()); err != nil {
		return toStatus(ctx, c.Log, err)
	}
	return nil
}

// checkScope refuses methods without a policy and keys without the scope.
func (c *Chain) checkScope(_ context.Context, call *Call, _ any) error {
	if isPublic(call.Method) {
		return nil
	}
	if call.Policy == nil {
		return status.Errorf(codes.PermissionDenied, "Method %s has no access policy", call.Method)
	}
	if call.Policy.GetScope() == keys.ScopeAccounts {
		// Accounts are the operator's to manage: the scope counts only on
		// a key of the operator's account, and the bootstrap key holds
		// it even when it was made before the scope existed.
		if !call.Key.ManagesAccounts() {
			return status.Errorf(codes.PermissionDenied, "API key lacks required scope: %s (only the operator's account manages accounts)", keys.ScopeAccounts)
		}
		return nil
	}
	if !call.Key.HasScope(call.Policy.GetScope()) {
		return status.Errorf(codes.PermissionDenied, "API key lacks required scope: %s", call.Policy.GetScope())
	}
	return nil
}

// clientIDGetter and userIDGetter are implemented by every world-scoped
// request message (a test checks that).
type (
	clientIDGetter interface{ GetClientId() string }
	userIDGetter   interface{ GetUserId() string }
)

// resolveWorld picks the world the request targets.
func (c *Chain) resolveWorld(ctx context.Context, call *Call, req any) error {
	if isPublic(call.Method) || call.Policy.GetWorldless() {
		return nil
	}
	var clientID string
	if g, ok := req.(clientIDGetter); ok {
		clientID = strings.TrimSpace(g.GetClientId())
	}
	bound := call.Key.ClientIDs
	switch {
	case clientID != "" && !call.Key.BoundTo(clientID):
		return status.Errorf(codes.PermissionDenied, "API key is not authorized for client '%s'", clientID)
	case clientID == "" && len(bound) == 1:
		clientID = bound[0]
	case clientID == "" && len(bound) > 1:
		return status.Errorf(codes.InvalidArgument, "'clientId' is required: this API key is bound to several worlds (%s)", strings.Join(bound, ", "))
	case clientID == "":
		ids, err := c.Worlds.IDs(ctx)
		if err != nil {
			return toStatus(ctx, c.Log, err)
		}
		if !call.Key.Operator() {
			// Only the worlds of the key's account count.
			var own []string
			for _, id := range ids {
				ok, err := c.reaches(ctx, call.Key, id)
				if err != nil {
					return toStatus(ctx, c.Log, err)
				}
				if ok {
					own = append(own, id)
				}
			}
			ids = own
		}
		if len(ids) != 1 {
			return status.Error(codes.InvalidArgument, "'clientId' is required")
		}
		clientID = ids[0]
	}
	// Another account's world is answered as one that does not exist,
	// before it is looked up.
	if ok, err := c.reaches(ctx, call.Key, clientID); err != nil {
		return toStatus(ctx, c.Log, err)
	} else if !ok {
		return toStatus(ctx, c.Log, UnknownWorld(clientID))
	}
	w, err := c.Worlds.World(ctx, clientID)
	if err != nil {
		return toStatus(ctx, c.Log, err)
	}
	if _, remote := w.(RemoteWorld); remote && call.forwarded {
		// Never forward a forwarded call again: the edge and this node
		// disagree on the host, which is moving.
		return errNotHostedHere(clientID)
	}
	call.World = w
	return nil
}

// resolveUser finds the tabletop user the request acts as. A user injected by
// the key cannot be replaced by the caller's `userId`.
func (c *Chain) resolveUser(ctx context.Context, call *Call, req any) error {
	if call.World == nil {
		return nil
	}
	var given string
	if g, ok := req.(userIDGetter); ok {
		given = strings.TrimSpace(g.GetUserId())
	}
	injected := call.Key.UserFor(call.World.Info().ClientID)
	name := given
	if injected != "" {
		name = injected
	}
	if name == "" {
		return nil
	}
	user, err := call.World.ResolveUser(ctx, name)
	if err != nil {
		return toStatus(ctx, c.Log, err)
	}
	if injected != "" && given != "" {
		other, err := call.World.ResolveUser(ctx, given)
		if err != nil || other.ID != user.ID {
			return status.Errorf(codes.PermissionDenied, "This API key acts as user '%s' and cannot act as '%s'", user.Name, given)
		}
	}
	call.User = user
	return nil
}

// checkPolicy applies the GM-only rule and world permissions of the method.
func (c *Chain) checkPolicy(_ context.Context, call *Call, _ any) error {
	user, policy := call.User, call.Policy
	if user == nil || policy == nil {
		return nil
	}
	if policy.GetGmOnly() && !user.IsGM() {
		return status.Errorf(codes.PermissionDenied, "User '%s' must be a GM to %s", user.Name, policy.GetGmAction())
	}
	if perm := policy.GetWorldPermission(); perm != "" && !call.World.Can(user, perm) {
		return status.Errorf(codes.PermissionDenied, "User '%s' does not have '%s' permission required to %s", user.Name, perm, policy.GetPermissionAction())
	}
	return nil
}

// step is one check of the chain that reads (and fills in) the [Call]; req
// is the request message, or nil for checks that do not need it.
type step func(ctx context.Context, call *Call, req any) error

// unaryStepsForwarding runs the steps before, then forwards a call whose
// world another node hosts to that node, or else runs the steps after and
// the handler.
func (c *Chain) unaryStepsForwarding(before, after []step) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call := CallFrom(ctx)
		for _, s := range before {
			if err := s(ctx, call, req); err != nil {
				return nil, err
			}
		}
		if remote, ok := call.World.(RemoteWorld); ok && !call.forwarded {
			return c.forward(ctx, call, remote, req, info.FullMethod)
		}
		for _, s := range after {
			if err := s(ctx, call, req); err != nil {
				return nil, err
			}
		}
		if key, ok := c.idempotency.keyOf(ctx, call); ok {
			return c.idempotency.serve(ctx, call, req, key, handler)
		}
		return handler(ctx, req)
	}
}

// streamStep runs a step on a stream: at once, or, when it needs the request,
// when the handler receives the first message.
func streamStep(s step, needsRequest bool) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !needsRequest {
			if err := s(ss.Context(), CallFrom(ss.Context()), nil); err != nil {
				return err
			}
			return handler(srv, ss)
		}
		return handler(srv, &stepStream{ServerStream: ss, step: s})
	}
}

// contextStream replaces a stream's context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// stepStream runs a step on the first message received.
type stepStream struct {
	grpc.ServerStream
	step step
	done bool
}

func (s *stepStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	if s.done {
		return nil
	}
	s.done = true
	ctx := s.Context()
	return s.step(ctx, CallFrom(ctx), m)
}
