package keys

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ErrForbidden is matched (with errors.Is) by every refusal of [Authorize].
// The refusal's own message names the limit that was hit, for example
// "API key may only create keys for its own worlds: demo; name them in
// 'clientIds'"; the relay answers it with 403 (gRPC PermissionDenied).
var ErrForbidden = errors.New("API key may not manage that key")

// forbiddenError is a refusal of Authorize: its message names the limit.
type forbiddenError struct{ msg string }

func (e *forbiddenError) Error() string { return e.msg }

// Is makes every refusal match ErrForbidden.
func (e *forbiddenError) Is(target error) bool { return target == ErrForbidden }

func forbidden(format string, args ...any) error {
	return &forbiddenError{msg: fmt.Sprintf(format, args...)}
}

// Action is what one key does to another, as judged by [Authorize].
type Action int

// The actions of key administration.
const (
	// ActionCreate is creating a new key.
	ActionCreate Action = iota + 1
	// ActionList is seeing a key in the key listing.
	ActionList
	// ActionRevoke is revoking a key.
	ActionRevoke
)

// verb is the action as it reads in refusal messages.
func (a Action) verb() string {
	switch a {
	case ActionCreate:
		return "create"
	case ActionList:
		return "list"
	case ActionRevoke:
		return "revoke"
	}
	return "manage"
}

// Authorize decides whether the key actor may perform action on the key
// target, so that no key can ever create or manage a key more powerful than
// itself. It is the one place where the relay decides this; it returns nil
// when the action is allowed and otherwise an error matching ErrForbidden
// whose message names the limit.
//
// For ActionCreate, target is the key about to be created, as the store
// normalised it from the caller's Spec (its ID is still empty).
//
// A target is inside the actor's bindings when both of these hold:
//
//   - Worlds: an actor bound to no world may act on any key; an actor bound
//     to worlds may act only on keys bound to some of those worlds, never on
//     a key bound to no world (which may use every world).
//   - Users: wherever the actor acts as a tabletop user (its per-world user,
//     else its user for every world), the target acts as that same user,
//     named by the same text. Where the actor has no user (GM-level access)
//     the target may have any user or none.
//
// Keys of accounts other than the operator's act only on keys of their own
// account; another account's key is answered as an unknown one (an error
// wrapping ErrNotFound, not ErrForbidden).
//
// Listing and revoking need only that: a key sees and may revoke exactly the
// keys inside its bindings, revoked ones included. Every key is inside its
// own bindings, so a key always sees itself and may revoke itself.
//
// Creating further needs the target's scopes to be a subset of the actor's,
// and, when the actor expires, the target to expire no later than it.
// Scopes and expiry do not limit listing and revoking: revoking takes power
// away and listing shows no secret, so within its worlds and users a key may
// manage a key that carries a scope it lacks or outlives it.
func Authorize(actor Key, action Action, target Key) error {
	verb := action.verb()

	// Accounts. A key of the operator's account may act on the keys of
	// every account; any other key only on its own account's keys. Another
	// account's key is answered exactly as a key that does not exist, so
	// that nothing reveals it.
	if !actor.Operator() && target.Account() != actor.Account() {
		if action == ActionCreate {
			return forbidden("API key may only create keys in its own account")
		}
		return notFound(target.ID)
	}

	// Worlds.
	if len(actor.ClientIDs) > 0 {
		own := strings.Join(actor.ClientIDs, ", ")
		if len(target.ClientIDs) == 0 {
			if action == ActionCreate {
				return forbidden("API key may only create keys for its own worlds: %s; name them in 'clientIds'", own)
			}
			return forbidden("API key may only %s keys bound to its own worlds (%s): key %s is bound to no world, so it may use every world", verb, own, target.ID)
		}
		for _, c := range target.ClientIDs {
			if slices.Contains(actor.ClientIDs, c) {
				continue
			}
			if action == ActionCreate {
				return forbidden("API key may only create keys for its own worlds: %s; %q is not one of them", own, c)
			}
			return forbidden("API key may only %s keys bound to its own worlds (%s): key %s is also bound to %q", verb, own, target.ID, c)
		}
	}

	// Users. The worlds the target can reach are its bound worlds or, for an
	// unbound target, every world: the worlds either key names a user for,
	// plus the sentinel "" that stands for every other world (UserFor("")
	// is the key's user for every world, since no client id is empty).
	worlds := target.ClientIDs
	if len(worlds) == 0 {
		worlds = []string{""}
		for _, m := range []map[string]string{actor.ClientUsers, target.ClientUsers} {
			for c := range m {
				if !slices.Contains(worlds, c) {
					worlds = append(worlds, c)
				}
			}
		}
		slices.Sort(worlds) // deterministic messages: "" (every other world) first
	}
	for _, c := range worlds {
		want := actor.UserFor(c)
		if want == "" || target.UserFor(c) == want {
			continue
		}
		where := fmt.Sprintf("in world %q", c)
		if c == "" {
			where = "in every world"
			if len(actor.ClientUsers) > 0 {
				where = "in every world other than " + strings.Join(sortedKeys(actor.ClientUsers), ", ")
			}
		}
		if action == ActionCreate {
			return forbidden("API key acts as user %q %s: keys it creates must act as %q there too", want, where, want)
		}
		return forbidden("API key acts as user %q %s: it may only %s keys that act as %q there too", want, where, verb, want)
	}

	if action != ActionCreate {
		return nil
	}

	// Scopes.
	var lacking []string
	for _, s := range target.Scopes {
		if !actor.HasScope(s) {
			lacking = append(lacking, s)
		}
	}
	if len(lacking) > 0 {
		return forbidden("API key may only create keys with its own scopes (%s): it lacks %s",
			strings.Join(actor.Scopes, ", "), strings.Join(lacking, ", "))
	}

	// Expiry.
	if !actor.ExpiresAt.IsZero() && (target.ExpiresAt.IsZero() || target.ExpiresAt.After(actor.ExpiresAt)) {
		return forbidden("API key expires at %s: keys it creates must expire no later ('expiresAt')",
			actor.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}

// sortedKeys returns the keys of m in order.
func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
