package world

import (
	"errors"
	"fmt"
)

// Kinds of failure. Every error the world returns wraps exactly one of these,
// so the transport layer can map it to a status with errors.Is; the error's
// own text is the message shown to the caller.
var (
	// ErrInvalid: a parameter is missing or malformed, or a named user does
	// not exist.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound: a document, folder or world does not exist.
	ErrNotFound = errors.New("not found")
	// ErrPermission: the user may not see or change the document.
	ErrPermission = errors.New("permission denied")
	// ErrConflict: the change collides with existing state (an id in use, a
	// file that exists).
	ErrConflict = errors.New("conflict")
	// ErrFailedPrecondition: the world is not in a state that allows the
	// operation (no active scene, not concentrating, not enough funds).
	ErrFailedPrecondition = errors.New("failed precondition")
	// ErrUnavailable: the world cannot serve requests now (closed, store
	// failure).
	ErrUnavailable = errors.New("unavailable")
	// ErrTooLarge: an input exceeds a documented size limit.
	ErrTooLarge = errors.New("too large")
	// ErrTimeout: the operation ran past its time limit and was stopped.
	ErrTimeout = errors.New("time-out")
	// ErrUnimplemented: the world does not offer the operation at all (a
	// kind of world without that capability, see [Capability]).
	ErrUnimplemented = errors.New("unimplemented")
)

// Error is a world error: a kind and a message for the caller.
type Error struct {
	Kind error
	Msg  string
	// Cause, when set, is the failure behind the error: a file system or
	// database error, which may name the server's paths, queries or other
	// internals. It is for the server's log only; Msg, which callers see,
	// never includes it (see [Wrapf]).
	Cause error
}

// Error returns the message for the caller, without the cause.
func (e *Error) Error() string { return e.Msg }

// Unwrap returns the kind, so errors.Is(err, ErrNotFound) works.
func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an [Error] of the given kind with a formatted message.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// Wrapf returns an [Error] of the given kind with a formatted message for
// the caller and cause for the log. Use it wherever a failure of the
// machinery (the file system, SQLite, an encoder) reaches a caller: the
// message says what failed in the caller's terms, the cause says why, to
// the operator only.
func Wrapf(kind, cause error, format string, args ...any) error {
	return &Error{Kind: kind, Msg: fmt.Sprintf(format, args...), Cause: cause}
}
