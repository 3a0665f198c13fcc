package keys

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestAuthorize(t *testing.T) {
	t.Parallel()
	expiry := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	all := AllScopes
	// Actors (and targets): the keys of a relay with two worlds, demo and
	// other.
	var (
		root           = Key{ID: "root", Scopes: all}
		demo           = Key{ID: "demo", Scopes: all, ClientIDs: []string{"demo"}}
		other          = Key{ID: "other", Scopes: all, ClientIDs: []string{"other"}}
		both           = Key{ID: "both", Scopes: all, ClientIDs: []string{"demo", "other"}}
		demoAlice      = Key{ID: "demoAlice", Scopes: all, ClientIDs: []string{"demo"}, ScopedUserID: "Alice"}
		demoBob        = Key{ID: "demoBob", Scopes: all, ClientIDs: []string{"demo"}, ScopedUserID: "Bob"}
		demoAliceCU    = Key{ID: "demoAliceCU", Scopes: all, ClientIDs: []string{"demo"}, ClientUsers: map[string]string{"demo": "Alice"}}
		bothAliceDemo  = Key{ID: "bothAliceDemo", Scopes: all, ClientIDs: []string{"demo", "other"}, ClientUsers: map[string]string{"demo": "Alice"}}
		unboundAlice   = Key{ID: "unboundAlice", Scopes: all, ScopedUserID: "Alice"}
		unboundCU      = Key{ID: "unboundCU", Scopes: all, ClientUsers: map[string]string{"demo": "Alice"}}
		unboundCUGM    = Key{ID: "unboundCUGM", Scopes: all, ScopedUserID: "Gamemaster", ClientUsers: map[string]string{"demo": "Alice"}}
		demoFew        = Key{ID: "demoFew", Scopes: []string{ScopeEntityRead, ScopeAdmin}, ClientIDs: []string{"demo"}}
		demoRead       = Key{ID: "demoRead", Scopes: []string{ScopeEntityRead}, ClientIDs: []string{"demo"}}
		demoExec       = Key{ID: "demoExec", Scopes: []string{ScopeEntityRead, ScopeExecuteJS}, ClientIDs: []string{"demo"}}
		demoExpiring   = Key{ID: "demoExpiring", Scopes: all, ClientIDs: []string{"demo"}, ExpiresAt: expiry}
		demoSameExpiry = Key{ID: "demoSameExpiry", Scopes: all, ClientIDs: []string{"demo"}, ExpiresAt: expiry}
		demoEarlier    = Key{ID: "demoEarlier", Scopes: all, ClientIDs: []string{"demo"}, ExpiresAt: expiry.Add(-time.Hour)}
		demoLater      = Key{ID: "demoLater", Scopes: all, ClientIDs: []string{"demo"}, ExpiresAt: expiry.Add(time.Second)}
	)
	const ok = ""
	tests := []struct {
		name   string
		actor  Key
		action Action
		target Key
		// want is "" when allowed, else a part of the refusal message.
		want string
	}{
		// Unbound creator × bound and unbound targets.
		{"unbound creates unbound", root, ActionCreate, root, ok},
		{"unbound creates bound", root, ActionCreate, demo, ok},
		{"unbound creates user key", root, ActionCreate, demoAlice, ok},
		{"unbound lists unbound", root, ActionList, unboundAlice, ok},
		{"unbound lists bound", root, ActionList, both, ok},
		{"unbound revokes unbound", root, ActionRevoke, root, ok},
		{"unbound revokes bound", root, ActionRevoke, demoExpiring, ok},

		// Bound creator × bound and unbound targets.
		{"bound creates unbound", demo, ActionCreate, root, "API key may only create keys for its own worlds: demo; name them in 'clientIds'"},
		{"bound creates same world", demo, ActionCreate, demo, ok},
		{"bound creates other world", demo, ActionCreate, other, `API key may only create keys for its own worlds: demo; "other" is not one of them`},
		{"bound creates superset of worlds", demo, ActionCreate, both, `"other" is not one of them`},
		{"bound to two creates one", both, ActionCreate, other, ok},
		{"bound lists unbound", demo, ActionList, root, "API key may only list keys bound to its own worlds (demo): key root is bound to no world"},
		{"bound lists same world", demo, ActionList, demoAlice, ok},
		{"bound lists other world", demo, ActionList, other, `key other is also bound to "other"`},
		{"bound lists superset of worlds", demo, ActionList, both, `key both is also bound to "other"`},
		{"bound revokes unbound", demo, ActionRevoke, root, "API key may only revoke keys bound to its own worlds (demo): key root is bound to no world"},
		{"bound revokes same world", demo, ActionRevoke, demoFew, ok},
		{"bound revokes other world", demo, ActionRevoke, other, `API key may only revoke keys bound to its own worlds (demo): key other is also bound to "other"`},

		// Users: a creator with a user passes it on, for every world or per world.
		{"user creates same user", demoAlice, ActionCreate, demoAlice, ok},
		{"user creates same user per world", demoAlice, ActionCreate, demoAliceCU, ok},
		{"user creates without user", demoAlice, ActionCreate, demo, `API key acts as user "Alice" in world "demo": keys it creates must act as "Alice" there too`},
		{"user creates other user", demoAlice, ActionCreate, demoBob, `acts as user "Alice" in world "demo"`},
		{"per-world user creates without", demoAliceCU, ActionCreate, demo, `acts as user "Alice" in world "demo"`},
		{"per-world user creates user for every world", demoAliceCU, ActionCreate, demoAlice, ok},
		{"per-world user, GM elsewhere, creates other-world key", bothAliceDemo, ActionCreate, other, ok},
		{"per-world user, GM elsewhere, creates both-world key", bothAliceDemo, ActionCreate, both, `acts as user "Alice" in world "demo"`},
		{"GM creates user key", demo, ActionCreate, demoBob, ok},
		{"unbound user creates unbound same user", unboundAlice, ActionCreate, unboundAlice, ok},
		{"unbound user creates unbound without user", unboundAlice, ActionCreate, root, `API key acts as user "Alice" in every world: keys it creates must act as "Alice" there too`},
		{"unbound user creates bound same user", unboundAlice, ActionCreate, demoAliceCU, ok},
		{"unbound user creates bound without user", unboundAlice, ActionCreate, demo, `acts as user "Alice" in world "demo"`},
		{"unbound user creates unbound with a per-world other user", unboundAlice, ActionCreate,
			Key{ScopedUserID: "Alice", ClientUsers: map[string]string{"other": "Bob"}, Scopes: all}, `acts as user "Alice" in world "other"`},
		{"unbound per-world user creates unbound GM", unboundCU, ActionCreate, root, `acts as user "Alice" in world "demo"`},
		{"unbound per-world user creates unbound same", unboundCU, ActionCreate, unboundCU, ok},
		{"unbound per-world user creates other world", unboundCU, ActionCreate, other, ok},
		{"unbound two users creates without the default", unboundCUGM, ActionCreate, unboundCU,
			`API key acts as user "Gamemaster" in every world other than demo: keys it creates must act as "Gamemaster" there too`},
		{"user lists same user", demoAlice, ActionList, demoAliceCU, ok},
		{"user lists GM key", demoAlice, ActionList, demo, `API key acts as user "Alice" in world "demo": it may only list keys that act as "Alice" there too`},
		{"user revokes other user", demoAlice, ActionRevoke, demoBob, `it may only revoke keys that act as "Alice" there too`},
		{"user revokes same user", unboundAlice, ActionRevoke, demoAlice, ok},

		// Scopes: a subset for creation; not a limit on listing and revoking.
		{"fewer scopes creates subset", demoFew, ActionCreate, demoRead, ok},
		{"fewer scopes creates same", demoFew, ActionCreate, demoFew, ok},
		{"fewer scopes creates more", demoFew, ActionCreate, demoExec, "API key may only create keys with its own scopes (entity:read, admin): it lacks execute-js"},
		{"fewer scopes creates every scope", demoFew, ActionCreate, demo, "it lacks entity:write, search"},
		{"fewer scopes lists more", demoFew, ActionList, demoExec, ok},
		{"fewer scopes revokes more", demoFew, ActionRevoke, demo, ok},

		// Expiry: no later than the creator's, for creation only.
		{"expiring creates never-expiring", demoExpiring, ActionCreate, demo, "API key expires at 2030-06-01T12:00:00Z: keys it creates must expire no later ('expiresAt')"},
		{"expiring creates later", demoExpiring, ActionCreate, demoLater, "expires at 2030-06-01T12:00:00Z"},
		{"expiring creates same expiry", demoExpiring, ActionCreate, demoSameExpiry, ok},
		{"expiring creates earlier", demoExpiring, ActionCreate, demoEarlier, ok},
		{"never-expiring creates expiring", demo, ActionCreate, demoEarlier, ok},
		{"expiring revokes never-expiring", demoExpiring, ActionRevoke, demo, ok},

		// A key and itself: always inside its own bindings.
		{"bound key lists itself", demoAliceCU, ActionList, demoAliceCU, ok},
		{"bound key revokes itself", demoFew, ActionRevoke, demoFew, ok},
		{"user key revokes itself", bothAliceDemo, ActionRevoke, bothAliceDemo, ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := Authorize(tt.actor, tt.action, tt.target)
			if tt.want == ok {
				if err != nil {
					t.Fatalf("Authorize(%s, %s, %s) = %v, want allowed", tt.actor.ID, tt.action.verb(), tt.target.ID, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Authorize(%s, %s, %s) allowed, want refusal %q", tt.actor.ID, tt.action.verb(), tt.target.ID, tt.want)
			}
			if !errors.Is(err, ErrForbidden) {
				t.Errorf("refusal %v does not match ErrForbidden", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("refusal = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestAuthorizeNeverEscalates checks the invariant behind the rules over
// every pair of a set of keys: whatever a key may create, it may also list
// and revoke, and every key may list and revoke itself.
func TestAuthorizeNeverEscalates(t *testing.T) {
	t.Parallel()
	expiry := time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)
	var set []Key
	for _, worlds := range [][]string{nil, {"demo"}, {"other"}, {"demo", "other"}} {
		for _, users := range []struct {
			scoped string
			per    map[string]string
		}{{"", nil}, {"Alice", nil}, {"", map[string]string{"demo": "Alice"}}, {"Bob", map[string]string{"demo": "Alice"}}} {
			for _, scopes := range [][]string{AllScopes, {ScopeEntityRead, ScopeAdmin}} {
				for _, exp := range []time.Time{{}, expiry} {
					set = append(set, Key{ID: "k", ClientIDs: worlds, ScopedUserID: users.scoped, ClientUsers: users.per, Scopes: scopes, ExpiresAt: exp})
				}
			}
		}
	}
	for i, a := range set {
		if err := Authorize(a, ActionList, a); err != nil {
			t.Errorf("key %d may not list itself: %v", i, err)
		}
		if err := Authorize(a, ActionRevoke, a); err != nil {
			t.Errorf("key %d may not revoke itself: %v", i, err)
		}
		if err := Authorize(a, ActionCreate, a); err != nil {
			t.Errorf("key %d may not create its own copy: %v", i, err)
		}
		for j, b := range set {
			if Authorize(a, ActionCreate, b) != nil {
				continue
			}
			if err := Authorize(a, ActionList, b); err != nil {
				t.Errorf("key %d may create key %d but not list it: %v", i, j, err)
			}
			if err := Authorize(a, ActionRevoke, b); err != nil {
				t.Errorf("key %d may create key %d but not revoke it: %v", i, j, err)
			}
			// Transitivity: whatever b may create, a may create too.
			for k, c := range set {
				if Authorize(b, ActionCreate, c) == nil && Authorize(a, ActionCreate, c) != nil {
					t.Errorf("key %d may create key %d, which may create key %d, which key %d may not create", i, j, k, i)
				}
			}
		}
	}
}
