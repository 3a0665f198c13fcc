// Package audit records who did what to the relay's accounts, keys,
// pairings, key requests, pair requests and sign-ins: when, as which
// account, with which key or session, from which address, and with what
// outcome, refusals included.
//
// Code that acts calls [Record] with the request's context and an
// [Entry]; the recorder travels in the context ([WithRecorder], put there
// once for every HTTP request by [Handler] and for every gRPC call by the
// server's interceptors), so that a new code path needs no wiring to be
// audited. A context without a recorder records nothing.
//
// A [Log] keeps the records in a [Store] (relay.db on a node alone, the
// cluster's JetStream state in a cluster), for a retention period and up
// to a number of records, whichever is reached first.
package audit

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Outcomes of an action.
const (
	// OutcomeOK is an action that was carried out.
	OutcomeOK = "ok"
	// OutcomeRefused is an action the relay refused: bad credentials,
	// missing scope, another account's thing, bad input, a limit.
	OutcomeRefused = "refused"
	// OutcomeFailed is an action that failed on the relay's side.
	OutcomeFailed = "failed"
)

// Actions. Each names a class (before the dot) and what was done; the
// class is what [Query.Action] may also name to select the whole class.
const (
	ActionAccountCreate  = "account.create"
	ActionAccountList    = "account.list"
	ActionAccountShow    = "account.show"
	ActionAccountUpdate  = "account.update"
	ActionAccountSuspend = "account.suspend"
	ActionAccountResume  = "account.resume"
	ActionAccountDelete  = "account.delete"

	ActionKeyCreate = "key.create"
	ActionKeyList   = "key.list"
	ActionKeyRevoke = "key.revoke"

	// ActionPairingCodeCreate is a pairing code made for a world.
	ActionPairingCodeCreate = "pairing.code"
	// ActionPairingPair is a tabletop trading a pairing code for its
	// connection token (`POST /auth/pair`).
	ActionPairingPair = "pairing.pair"
	// ActionPairingUnpair is a linked world unpaired by an API key.
	ActionPairingUnpair = "pairing.unpair"
	// ActionPairingSelfUnpair is a tabletop unpairing itself with its
	// token.
	ActionPairingSelfUnpair = "pairing.self-unpair"

	ActionKeyRequestCreate   = "key-request.create"
	ActionKeyRequestShow     = "key-request.show"
	ActionKeyRequestApprove  = "key-request.approve"
	ActionKeyRequestDeny     = "key-request.deny"
	ActionKeyRequestDeliver  = "key-request.deliver"
	ActionKeyRequestExchange = "key-request.exchange"

	ActionPairRequestCreate  = "pair-request.create"
	ActionPairRequestShow    = "pair-request.show"
	ActionPairRequestApprove = "pair-request.approve"
	ActionPairRequestDeny    = "pair-request.deny"
	ActionPairRequestDeliver = "pair-request.deliver"

	// ActionSignIn is a sign-in to the console: with an API key, or with
	// an account's name and password (the session is in Entry.Session).
	ActionSignIn = "sign-in"
	// ActionSignOut is a console session ended by its holder.
	ActionSignOut = "sign-out"
	// ActionSignUp is an account made by POST /signup, or a refused one.
	ActionSignUp = "sign-up"
)

// Entry is one audit record.
type Entry struct {
	// ID is the record's id, given by the store: records sort by it in
	// the order they were kept.
	ID string
	// Time is when the action happened; Record sets it when zero.
	Time time.Time
	// Account is the account the record belongs to: the acting key's or
	// session's account, or the account that owns what was acted on when
	// no key acted (a tabletop trading its pairing code). Empty when the
	// actor is unknown (a refused key); only the operator sees those.
	Account string
	// KeyID is the id of the API key that acted, if any (never the key).
	KeyID string
	// Session is the id of the console session that acted, if any (never
	// its cookie).
	Session string
	// Address is the client's address; Record takes it from the context
	// when empty.
	Address string
	// Action is what was done (the Action* constants).
	Action string
	// Target is the id of what was acted on: a key, an account, a world.
	Target string
	// Outcome is OutcomeOK, OutcomeRefused or OutcomeFailed.
	Outcome string
	// Detail says more: the refusal's message, or what was made.
	Detail string
	// RequestID is the id of the API call, when there is one.
	RequestID string
}

// Recorder records audit entries. Record never fails the action it
// records: a store that cannot keep the entry logs why.
type Recorder interface {
	Record(ctx context.Context, e Entry)
}

// scopeKey is the context key of what this package keeps in a context:
// one value for the recorder and the address together, so that a request
// pays for one context value, not two.
type scopeKey struct{}

type scope struct {
	recorder Recorder
	address  string
}

func scopeFrom(ctx context.Context) scope {
	s, _ := ctx.Value(scopeKey{}).(scope)
	return s
}

// WithRecorder returns ctx carrying r, which [Record] records to.
func WithRecorder(ctx context.Context, r Recorder) context.Context {
	if r == nil {
		return ctx
	}
	s := scopeFrom(ctx)
	s.recorder = r
	return context.WithValue(ctx, scopeKey{}, s)
}

// RecorderFrom returns the recorder ctx carries, or nil.
func RecorderFrom(ctx context.Context) Recorder {
	return scopeFrom(ctx).recorder
}

// WithAddress returns ctx carrying the client's address (host, or
// host:port, of which only the host is kept).
func WithAddress(ctx context.Context, remoteAddr string) context.Context {
	s := scopeFrom(ctx)
	s.address = hostOf(remoteAddr)
	return context.WithValue(ctx, scopeKey{}, s)
}

// AddressFrom returns the client address ctx carries, or "".
func AddressFrom(ctx context.Context) string {
	return scopeFrom(ctx).address
}

// hostOf is the host of host:port, or the whole when it has no port.
func hostOf(remoteAddr string) string {
	if h, _, err := net.SplitHostPort(remoteAddr); err == nil {
		return h
	}
	return remoteAddr
}

// Record records e with the recorder ctx carries, filling in the client's
// address when e leaves it empty (the recorder sets the time). Without a recorder it
// does nothing. This is the one call every audited code path makes; a
// sign-in, for example:
//
//	audit.Record(r.Context(), audit.Entry{Action: audit.ActionSignIn,
//		Account: accountID, Session: sessionID, Outcome: audit.OutcomeOK})
func Record(ctx context.Context, e Entry) {
	r := RecorderFrom(ctx)
	if r == nil {
		return
	}
	if e.Address == "" {
		e.Address = AddressFrom(ctx)
	}
	if e.Outcome == "" {
		e.Outcome = OutcomeOK
	}
	r.Record(ctx, e)
}

// Handler puts r and the client's address into the context of every
// request next serves, so that whatever serves it can [Record].
func Handler(next http.Handler, r Recorder) http.Handler {
	if r == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx := context.WithValue(req.Context(), scopeKey{}, scope{recorder: r, address: hostOf(req.RemoteAddr)})
		next.ServeHTTP(w, req.WithContext(ctx))
	})
}
