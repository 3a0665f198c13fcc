package world

import "context"

// Caller is what a world may learn about the caller of an operation beyond
// the user it acts as. The embedded engine needs none of it; a linked
// world forwards it to the tabletop module, which applies its own checks
// (the module refuses macro writes to a key without `macro:write`, for
// instance).
type Caller struct {
	// Scopes are the API key's scopes; empty when the caller is not known
	// by a key (a call made by the relay itself).
	Scopes []string
}

// callerKey is the context key of the [Caller].
type callerKey struct{}

// WithCaller returns a context carrying the caller. The relay's
// interceptors put it in the context of every call before they fill it in,
// so the pointer must stay valid for the call's lifetime.
func WithCaller(ctx context.Context, c *Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the context's caller, or nil when there is none.
func CallerFrom(ctx context.Context) *Caller {
	c, _ := ctx.Value(callerKey{}).(*Caller)
	return c
}
