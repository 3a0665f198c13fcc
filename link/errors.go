package link

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/tabletop-relay/relay/internal/clientid"
	"github.com/tabletop-relay/relay/world"
)

// Kinds of failure of a call to a linked world. Every error [Hub.Call]
// returns for them matches one of these with errors.Is, and also holds a
// *world.Error of the matching world kind (found with errors.As), so that
// the relay maps it to its status without knowing this package.
var (
	// ErrNotConnected: the world has no live connection (503). The message
	// is `world <clientId> is not connected`.
	ErrNotConnected = errors.New("world not connected")
	// ErrDisconnected: the connection closed while the request waited for
	// its reply (503).
	ErrDisconnected = errors.New("world disconnected")
	// ErrTimeout: no reply came within the reply time-out (504).
	ErrTimeout = errors.New("world did not answer in time")
	// ErrBusy: the world has as many requests in flight as allowed, or does
	// not read what is sent to it (503).
	ErrBusy = errors.New("world busy")
	// ErrReplyRefused: the reply was larger than the hub's MaxReplyBytes
	// or nested deeper than its MaxDepth (503); the connection goes
	// on.
	ErrReplyRefused = errors.New("world reply refused")
)

// Kinds of failure of pairing and authentication. The pairing endpoints
// answer each with its status; messages never contain a code or a token.
var (
	// ErrCodeRejected: the pairing code is unknown, used or expired (401).
	// One message covers the three, so that guessing learns nothing.
	ErrCodeRejected = errors.New("Pairing code is invalid, used or expired")
	// ErrTokenRejected: the connection token is unknown or revoked, or
	// belongs to another world (401, or close code 1008 on the socket).
	ErrTokenRejected = errors.New("Authentication failed")
	// ErrUnknownWorld: no linked world has that clientId (404).
	ErrUnknownWorld = errors.New("linked world not found")
	// ErrCodeForNewWorld: a code made for a new world was presented with
	// the clientId and server fingerprint of a world paired before (403).
	// Pairing a known world again takes a code made for that world, by a
	// key that may manage it; the fingerprint is no secret and proves
	// nothing.
	ErrCodeForNewWorld = errors.New("pairing code for a new world")
)

// CallError is the failure of one call to a linked world: its kind (one of
// ErrNotConnected, ErrDisconnected, ErrTimeout, ErrBusy), the world and
// the request type. Its message names both, for the caller.
type CallError struct {
	// Kind is the kind of failure.
	Kind error
	// ClientID is the world called.
	ClientID string
	// RequestType is the request type sent, such as `entity`.
	RequestType string
	msg         string
	werr        *world.Error
}

func (e *CallError) Error() string { return e.msg }

// Unwrap returns the kind and the equivalent world error, so that both
// errors.Is(err, ErrTimeout) and errors.As(err, &*world.Error) work.
func (e *CallError) Unwrap() []error { return []error{e.Kind, e.werr} }

// newCallError builds the error of one kind for a call.
func newCallError(kind error, clientID, requestType string, detail string) *CallError {
	var msg string
	worldKind := world.ErrUnavailable
	switch kind {
	case ErrNotConnected:
		msg = fmt.Sprintf("world %s is not connected", clientID)
	case ErrDisconnected:
		msg = fmt.Sprintf("world %s disconnected before answering %s", clientID, requestType)
	case ErrTimeout:
		msg = fmt.Sprintf("world %s did not answer %s within %s", clientID, requestType, detail)
		worldKind = world.ErrTimeout
	case ErrReplyRefused:
		msg = fmt.Sprintf("world %s answered %s with a reply the relay refuses: %s", clientID, requestType, detail)
	default:
		msg = fmt.Sprintf("world %s cannot take %s now: %s", clientID, requestType, detail)
	}
	return &CallError{Kind: kind, ClientID: clientID, RequestType: requestType, msg: msg,
		werr: &world.Error{Kind: worldKind, Msg: msg}}
}

// kindError is a pairing error: a link kind, the equivalent world error,
// and a message.
type kindError struct {
	kind error
	werr *world.Error
}

func (e *kindError) Error() string   { return e.werr.Msg }
func (e *kindError) Unwrap() []error { return []error{e.kind, e.werr} }

// unknownWorld is the error for a clientId that names no linked world.
// UnknownWorld returns the error of a store that has no linked world with
// that clientId: it matches ErrUnknownWorld and answers 404 naming the
// world. Stores other than this package's own return it too.
func UnknownWorld(clientID string) error { return unknownWorld(clientID) }

func unknownWorld(clientID string) error {
	return &kindError{kind: ErrUnknownWorld, werr: &world.Error{Kind: world.ErrNotFound,
		Msg: "Linked world not found: " + displayID(clientID)}}
}

// displayID is a clientId for a message: as it is when it has the form of
// one, else quoted and cut short, since it comes from a caller.
func displayID(clientID string) string {
	if clientid.Valid(clientID) {
		return clientID
	}
	return quoteShort(clientID)
}

// invalid is a world.ErrInvalid error (400) naming a parameter.
func invalid(format string, args ...any) error {
	return world.Errorf(world.ErrInvalid, format, args...)
}

// quoteShort quotes a caller's text for a message, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		s = s[:64] + "…"
	}
	return strconv.Quote(s)
}
