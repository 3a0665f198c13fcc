package main

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/relaytest"
	"github.com/tabletop-relay/relay/server/keys"
)

// keyCall is the outcome of one call of the key service, whichever the
// transport: the HTTP status (for gRPC, the status of the code), the error
// message, and the decoded response.
type keyCall struct {
	status int
	msg    string
	// plaintext and key are a creation's answer; key also a revocation's.
	plaintext string
	key       *relayv1.ApiKey
	// keys is a listing's answer.
	keys []*relayv1.ApiKey
}

// ids returns the ids of a listing.
func (c keyCall) ids() []string {
	var out []string
	for _, k := range c.keys {
		out = append(out, k.GetId())
	}
	return out
}

// keyTransport calls the key service over REST or over gRPC.
type keyTransport struct {
	name   string
	create func(t *testing.T, key string, req *relayv1.CreateKeyRequest) keyCall
	list   func(t *testing.T, key string) keyCall
	revoke func(t *testing.T, key, id string) keyCall
}

// keyTransports returns the two ways to the key service: REST through the
// gateway, and gRPC over the network (h2c on the relay's address), as the
// CLI calls it.
func keyTransports(t *testing.T, tr *testRelay) []keyTransport {
	t.Helper()
	conn, err := grpc.NewClient(tr.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	svc := relayv1.NewKeyServiceClient(conn)

	// restCall decodes the envelope's data into m.
	restCall := func(t *testing.T, r relaytest.Response, m proto.Message) keyCall {
		t.Helper()
		c := keyCall{status: r.Status}
		if r.Status != http.StatusOK {
			c.msg = r.ErrorText(t)
			return c
		}
		var env struct{ Data json.RawMessage }
		if err := json.Unmarshal(r.Body, &env); err != nil {
			t.Fatalf("%v: %s", err, r.Body)
		}
		if err := protojson.Unmarshal(env.Data, m); err != nil {
			t.Fatalf("%v: %s", err, env.Data)
		}
		return c
	}
	// grpcCall fills the status and message of an RPC's outcome.
	grpcCall := func(err error) keyCall {
		st := status.Convert(err)
		return keyCall{status: runtime.HTTPStatusFromCode(st.Code()), msg: st.Message()}
	}
	withKey := func(key string) (context.Context, context.CancelFunc) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", key), cancel
	}

	return []keyTransport{
		{
			name: "REST",
			create: func(t *testing.T, key string, req *relayv1.CreateKeyRequest) keyCall {
				t.Helper()
				body, err := protojson.Marshal(req)
				if err != nil {
					t.Fatal(err)
				}
				var resp relayv1.CreateKeyResponse
				c := restCall(t, tr.Do(http.MethodPost, "/keys", key, nil, body), &resp)
				c.plaintext, c.key = resp.GetKey(), resp.GetApiKey()
				return c
			},
			list: func(t *testing.T, key string) keyCall {
				t.Helper()
				var resp relayv1.ListKeysResponse
				c := restCall(t, tr.Do(http.MethodGet, "/keys", key, nil, nil), &resp)
				c.keys = resp.GetKeys()
				return c
			},
			revoke: func(t *testing.T, key, id string) keyCall {
				t.Helper()
				var resp relayv1.RevokeKeyResponse
				c := restCall(t, tr.Do(http.MethodDelete, "/keys/"+id, key, nil, nil), &resp)
				c.key = resp.GetApiKey()
				return c
			},
		},
		{
			name: "gRPC",
			create: func(t *testing.T, key string, req *relayv1.CreateKeyRequest) keyCall {
				ctx, cancel := withKey(key)
				defer cancel()
				resp, err := svc.CreateKey(ctx, req)
				c := grpcCall(err)
				c.plaintext, c.key = resp.GetKey(), resp.GetApiKey()
				return c
			},
			list: func(t *testing.T, key string) keyCall {
				ctx, cancel := withKey(key)
				defer cancel()
				resp, err := svc.ListKeys(ctx, &relayv1.ListKeysRequest{})
				c := grpcCall(err)
				c.keys = resp.GetKeys()
				return c
			},
			revoke: func(t *testing.T, key, id string) keyCall {
				ctx, cancel := withKey(key)
				defer cancel()
				resp, err := svc.RevokeKey(ctx, &relayv1.RevokeKeyRequest{Id: id})
				c := grpcCall(err)
				c.key = resp.GetApiKey()
				return c
			},
		},
	}
}

// keyWorks reports whether a plaintext key still authenticates.
func (tr *testRelay) keyWorks(plaintext string) bool {
	_, err := tr.Keys().Authenticate(context.Background(), plaintext)
	return err == nil
}

// keyCount is the number of stored keys, revoked ones included.
func (tr *testRelay) keyCount(t *testing.T) int {
	t.Helper()
	n, err := tr.Keys().Count(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKeyAuthorityEveryCombination: bound and unbound creators × unbound
// targets, targets bound to the creator's world and targets bound to another
// world × create, list and revoke, over REST and gRPC. Only an unbound key
// manages unbound keys; a bound key manages only keys of its own worlds.
func TestKeyAuthorityEveryCombination(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	every := []string{"all"}

	for _, tp := range keyTransports(t, tr) {
		type creator struct {
			name, key, id string
			bound         bool
		}
		unboundKey, unboundID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "unbound creator", Scopes: every})
		boundKey, boundID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "bound creator", Scopes: every, ClientIds: []string{"demo"}})
		creators := []creator{{"unbound creator", unboundKey, unboundID, false}, {"bound creator", boundKey, boundID, true}}
		targets := []struct {
			name    string
			clients []string
		}{
			{"unbound target", nil},
			{"target bound to the creator's world", []string{"demo"}},
			{"target bound to another world", []string{otherWorld}},
			{"target bound to the creator's world and another", []string{"demo", otherWorld}},
		}
		for _, cr := range creators {
			for _, tg := range targets {
				allowed := !cr.bound || slices.Equal(tg.clients, []string{"demo"})
				t.Run(tp.name+"/"+cr.name+"/"+tg.name, func(t *testing.T) {
					// Create.
					before := tr.keyCount(t)
					c := tp.create(t, cr.key, &relayv1.CreateKeyRequest{Name: "made by " + cr.name, Scopes: every, ClientIds: tg.clients})
					switch {
					case allowed && c.status != http.StatusOK:
						t.Fatalf("create: %d %s", c.status, c.msg)
					case allowed:
						if c.key.GetCreatedBy() != cr.id || !tr.keyWorks(c.plaintext) || !slices.Equal(c.key.GetClientIds(), tg.clients) {
							t.Fatalf("created %v (works: %v), want createdBy %s", c.key, tr.keyWorks(c.plaintext), cr.id)
						}
					default:
						if c.status != http.StatusForbidden || !strings.HasPrefix(c.msg, "API key may only create keys for its own worlds: demo;") {
							t.Fatalf("create: %d %q, want 403 naming the worlds", c.status, c.msg)
						}
						if n := tr.keyCount(t); n != before {
							t.Fatalf("a refused creation stored a key: %d keys, were %d", n, before)
						}
					}

					// List: the admin makes a target key; the creator sees it
					// only when it is inside its bindings, and always sees
					// itself.
					plain, id := tr.NewKey(&relayv1.CreateKeyRequest{Name: "target", Scopes: every, ClientIds: tg.clients})
					l := tp.list(t, cr.key)
					if l.status != http.StatusOK {
						t.Fatalf("list: %d %s", l.status, l.msg)
					}
					if got := slices.Contains(l.ids(), id); got != allowed {
						t.Fatalf("listing holds the target: %v, want %v", got, allowed)
					}
					if !slices.Contains(l.ids(), cr.id) {
						t.Fatal("listing misses the calling key itself")
					}
					for _, k := range l.keys {
						if cr.bound && (len(k.GetClientIds()) == 0 || slices.ContainsFunc(k.GetClientIds(), func(c string) bool { return c != "demo" })) {
							t.Fatalf("bound creator sees key %s bound to %v", k.GetName(), k.GetClientIds())
						}
					}

					// Revoke.
					r := tp.revoke(t, cr.key, id)
					if allowed {
						if r.status != http.StatusOK || r.key.GetRevokedAt() == "" || tr.keyWorks(plain) {
							t.Fatalf("revoke: %d %s %v; key still works: %v", r.status, r.msg, r.key, tr.keyWorks(plain))
						}
						return
					}
					if r.status != http.StatusForbidden || !strings.HasPrefix(r.msg, "API key may only revoke keys bound to its own worlds (demo): key "+id) {
						t.Fatalf("revoke: %d %q, want 403 naming the worlds", r.status, r.msg)
					}
					if !tr.keyWorks(plain) {
						t.Fatal("a refused revocation revoked the key")
					}
				})
			}
		}
	}
}

// TestKeyAuthorityBoundAdminAttack replays the attack of issue 12: an admin
// key bound to one world created an unbound GM-level key, listed every key
// and revoked the bootstrap admin key. Each step is refused now, over REST
// and gRPC, and the bootstrap key keeps working.
func TestKeyAuthorityBoundAdminAttack(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	adminID := tr.keyID(t, tr.AdminKey)
	for _, tp := range keyTransports(t, tr) {
		t.Run(tp.name, func(t *testing.T) {
			bound, _ := tr.NewKey(&relayv1.CreateKeyRequest{Name: "demo admin " + tp.name, Scopes: []string{"all"}, ClientIds: []string{"demo"}})
			c := tp.create(t, bound, &relayv1.CreateKeyRequest{Name: "escape", Scopes: []string{"all"}})
			if c.status != http.StatusForbidden || c.msg != "API key may only create keys for its own worlds: demo; name them in 'clientIds'" {
				t.Fatalf("unbound GM key: %d %q", c.status, c.msg)
			}
			l := tp.list(t, bound)
			if l.status != http.StatusOK || slices.Contains(l.ids(), adminID) {
				t.Fatalf("listing: %d %v holds the admin key %s", l.status, l.ids(), adminID)
			}
			r := tp.revoke(t, bound, adminID)
			if r.status != http.StatusForbidden || !strings.Contains(r.msg, "is bound to no world") {
				t.Fatalf("revoke admin: %d %q", r.status, r.msg)
			}
			if !tr.keyWorks(tr.AdminKey) {
				t.Fatal("the bootstrap admin key was revoked")
			}
			// An unknown id is still "not found".
			if r := tp.revoke(t, bound, "0123456789abcdef"); r.status != http.StatusNotFound {
				t.Fatalf("unknown id: %d %q", r.status, r.msg)
			}
		})
	}
}

// keyID returns the id of a plaintext key.
func (tr *testRelay) keyID(t *testing.T, plaintext string) string {
	t.Helper()
	k, err := tr.Keys().Authenticate(context.Background(), plaintext)
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// TestKeyAuthorityScopesUsersExpiry: a key creates only keys with some of its
// scopes, with its own user wherever it has one, and expiring no later than
// itself; a key with a user lists and revokes only keys with that user; a
// key may revoke itself. Over REST and gRPC.
func TestKeyAuthorityScopesUsersExpiry(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	demoOnly := []string{"demo"}
	for _, tp := range keyTransports(t, tr) {
		t.Run(tp.name+"/scopes", func(t *testing.T) {
			few, fewID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "few scopes", Scopes: []string{"entity:read,admin"}, ClientIds: demoOnly})
			if c := tp.create(t, few, &relayv1.CreateKeyRequest{Name: "reader", Scopes: []string{"entity:read"}, ClientIds: demoOnly}); c.status != http.StatusOK || c.key.GetCreatedBy() != fewID {
				t.Fatalf("subset of scopes: %d %s %v", c.status, c.msg, c.key)
			}
			for _, scopes := range [][]string{{"entity:read", "execute-js"}, {"all"}} {
				before := tr.keyCount(t)
				c := tp.create(t, few, &relayv1.CreateKeyRequest{Name: "more", Scopes: scopes, ClientIds: demoOnly})
				if c.status != http.StatusForbidden || !strings.HasPrefix(c.msg, "API key may only create keys with its own scopes (entity:read, admin): it lacks ") ||
					!strings.Contains(c.msg, "execute-js") || tr.keyCount(t) != before {
					t.Fatalf("scopes %v: %d %q", scopes, c.status, c.msg)
				}
			}
			// A bad scope is a 400 before any authority question.
			if c := tp.create(t, few, &relayv1.CreateKeyRequest{Name: "bad", Scopes: []string{"wizardry"}, ClientIds: demoOnly}); c.status != http.StatusBadRequest ||
				!strings.Contains(c.msg, `unknown scope "wizardry" (the scopes are entity:read, `) || !strings.Contains(c.msg, "or all for every one") {
				t.Fatalf("unknown scope: %d %q", c.status, c.msg)
			}
		})

		t.Run(tp.name+"/user for every world", func(t *testing.T) {
			alice, aliceKeyID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice admin", Scopes: []string{"all"}, ClientIds: demoOnly, ScopedUserId: "Alice"})
			gmPlain, gmID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "gm in demo", Scopes: []string{"all"}, ClientIds: demoOnly})
			_, bobID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "bob in demo", Scopes: []string{"all"}, ClientIds: demoOnly, ScopedUserId: "Bob"})
			refused := []*relayv1.CreateKeyRequest{
				{Name: "no user", Scopes: []string{"all"}, ClientIds: demoOnly},
				{Name: "bob", Scopes: []string{"all"}, ClientIds: demoOnly, ScopedUserId: "Bob"},
				{Name: "gm there", Scopes: []string{"all"}, ClientIds: demoOnly, ScopedUserId: "Alice", ClientUsers: map[string]string{"demo": "Gamemaster"}},
			}
			for _, req := range refused {
				before := tr.keyCount(t)
				c := tp.create(t, alice, req)
				if c.status != http.StatusForbidden || c.msg != `API key acts as user "Alice" in world "demo": keys it creates must act as "Alice" there too` || tr.keyCount(t) != before {
					t.Fatalf("%s: %d %q", req.GetName(), c.status, c.msg)
				}
			}
			for _, req := range []*relayv1.CreateKeyRequest{
				{Name: "alice too", Scopes: []string{"entity:read"}, ClientIds: demoOnly, ScopedUserId: "Alice"},
				{Name: "alice per world", Scopes: []string{"entity:read"}, ClientIds: demoOnly, ClientUsers: map[string]string{"demo": "Alice"}},
			} {
				c := tp.create(t, alice, req)
				if c.status != http.StatusOK || c.key.GetCreatedBy() != aliceKeyID {
					t.Fatalf("%s: %d %q", req.GetName(), c.status, c.msg)
				}
				// The new key acts as Alice: the Goblin (NONE) is hidden, Aria (hers) is not.
				if r := tr.Do(http.MethodGet, "/get", c.plaintext, relaytest.Q("uuid", relaytest.GoblinUUID), nil); r.Status != http.StatusForbidden {
					t.Fatalf("%s read the Goblin: %d %s", req.GetName(), r.Status, r.Body)
				}
				if r := tr.Do(http.MethodGet, "/get", c.plaintext, relaytest.Q("uuid", relaytest.AriaUUID), nil); r.Status != http.StatusOK {
					t.Fatalf("%s read Aria: %d %s", req.GetName(), r.Status, r.Body)
				}
			}
			l := tp.list(t, alice)
			if l.status != http.StatusOK || slices.Contains(l.ids(), gmID) || slices.Contains(l.ids(), bobID) || !slices.Contains(l.ids(), aliceKeyID) {
				t.Fatalf("listing: %d %v", l.status, l.ids())
			}
			for _, k := range l.keys {
				if k.GetScopedUserId() != "Alice" && k.GetClientUsers()["demo"] != "Alice" {
					t.Fatalf("Alice's key sees %s (%v, %v)", k.GetName(), k.GetScopedUserId(), k.GetClientUsers())
				}
			}
			r := tp.revoke(t, alice, gmID)
			if r.status != http.StatusForbidden || r.msg != `API key acts as user "Alice" in world "demo": it may only revoke keys that act as "Alice" there too` || !tr.keyWorks(gmPlain) {
				t.Fatalf("revoke GM key: %d %q", r.status, r.msg)
			}
			// A key may revoke itself.
			if r := tp.revoke(t, alice, aliceKeyID); r.status != http.StatusOK || tr.keyWorks(alice) {
				t.Fatalf("revoke itself: %d %q", r.status, r.msg)
			}
		})

		t.Run(tp.name+"/user per world", func(t *testing.T) {
			// Unbound, Alice in demo, GM-level everywhere else.
			perWorld, perWorldID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "alice in demo", Scopes: []string{"all"}, ClientUsers: map[string]string{"demo": "Alice"}})
			c := tp.create(t, perWorld, &relayv1.CreateKeyRequest{Name: "gm everywhere", Scopes: []string{"all"}})
			if c.status != http.StatusForbidden || c.msg != `API key acts as user "Alice" in world "demo": keys it creates must act as "Alice" there too` {
				t.Fatalf("GM everywhere: %d %q", c.status, c.msg)
			}
			for _, req := range []*relayv1.CreateKeyRequest{
				{Name: "gm elsewhere", Scopes: []string{"all"}, ClientIds: []string{otherWorld}},
				{Name: "same", Scopes: []string{"all"}, ClientUsers: map[string]string{"demo": "Alice"}},
				{Name: "alice everywhere", Scopes: []string{"all"}, ScopedUserId: "Alice"},
			} {
				if c := tp.create(t, perWorld, req); c.status != http.StatusOK || c.key.GetCreatedBy() != perWorldID {
					t.Fatalf("%s: %d %q", req.GetName(), c.status, c.msg)
				}
			}
		})

		t.Run(tp.name+"/expiry", func(t *testing.T) {
			exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
			expiring, expiringID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "expiring", Scopes: []string{"all"}, ClientIds: demoOnly, ExpiresAt: exp.Format(time.RFC3339)})
			want := "API key expires at " + exp.Format(time.RFC3339) + ": keys it creates must expire no later ('expiresAt')"
			for _, at := range []string{"", exp.Add(time.Second).Format(time.RFC3339)} {
				if c := tp.create(t, expiring, &relayv1.CreateKeyRequest{Name: "longer", Scopes: []string{"all"}, ClientIds: demoOnly, ExpiresAt: at}); c.status != http.StatusForbidden || c.msg != want {
					t.Fatalf("expiry %q: %d %q", at, c.status, c.msg)
				}
			}
			for _, at := range []time.Time{exp, exp.Add(-30 * time.Minute)} {
				c := tp.create(t, expiring, &relayv1.CreateKeyRequest{Name: "shorter", Scopes: []string{"all"}, ClientIds: demoOnly, ExpiresAt: at.Format(time.RFC3339)})
				if c.status != http.StatusOK || c.key.GetExpiresAt() != at.Format(time.RFC3339) || c.key.GetCreatedBy() != expiringID {
					t.Fatalf("expiry %v: %d %q %v", at, c.status, c.msg, c.key)
				}
			}
		})
	}
}

// TestKeyCreatorRecorded: the bootstrap key records "bootstrap", a created
// key the key that created it, and the listing shows it as `createdBy` over
// REST.
func TestKeyCreatorRecorded(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t)
	adminID := tr.keyID(t, tr.AdminKey)
	child, childID := tr.NewKey(&relayv1.CreateKeyRequest{Name: "child", Scopes: []string{"admin"}})
	grandchild := tr.Do(http.MethodPost, "/keys", child, nil, map[string]any{"name": "grandchild", "scopes": []string{"admin"}})
	if grandchild.Status != http.StatusOK {
		t.Fatalf("grandchild: %d %s", grandchild.Status, grandchild.Body)
	}
	grandchildID, _ := grandchild.Data(t)["apiKey"].(map[string]any)["id"].(string)

	r := tr.Do(http.MethodGet, "/keys", tr.AdminKey, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("list: %d %s", r.Status, r.Body)
	}
	want := map[string]string{adminID: keys.CreatedByBootstrap, childID: adminID, grandchildID: childID}
	listed, _ := r.Data(t)["keys"].([]any)
	if len(listed) != len(want) {
		t.Fatalf("listing: %s", r.Body)
	}
	for _, item := range listed {
		k, _ := item.(map[string]any)
		id, _ := k["id"].(string)
		if got, ok := k["createdBy"]; !ok || got != want[id] {
			t.Errorf("key %s: createdBy %v (present: %v), want %q", id, got, ok, want[id])
		}
	}
}
