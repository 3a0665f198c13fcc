package server

import (
	"context"
	"log/slog"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
	"github.com/tabletop-relay/relay/world"
)

// fakeKeys authenticates a fixed set of keys.
type fakeKeys map[string]keys.Key

func (f fakeKeys) Authenticate(_ context.Context, plaintext string) (keys.Key, error) {
	k, ok := f[plaintext]
	if !ok {
		return keys.Key{}, keys.ErrUnknown
	}
	if !k.Enabled {
		return keys.Key{}, keys.ErrDisabled
	}
	return k, nil
}

// fakeWorld implements the part of world.World the interceptors use.
type fakeWorld struct {
	world.World
	id    string
	users []world.User
	perms map[string]world.Role
}

func (w *fakeWorld) Info() world.Info { return world.Info{ClientID: w.id} }

func (w *fakeWorld) ResolveUser(_ context.Context, idOrName string) (*world.User, error) {
	for _, u := range w.users {
		if u.ID == idOrName {
			return &u, nil
		}
	}
	for _, u := range w.users {
		if strings.EqualFold(u.Name, idOrName) {
			return &u, nil
		}
	}
	return nil, world.Errorf(world.ErrInvalid, "User not found: %s", idOrName)
}

func (w *fakeWorld) Can(u *world.User, perm string) bool {
	role, ok := w.perms[perm]
	return u == nil || (ok && u.Role >= role)
}

// fakeWorlds serves fake worlds by client id.
type fakeWorlds map[string]*fakeWorld

func (f fakeWorlds) World(_ context.Context, id string) (world.World, error) {
	if id == "down" {
		return nil, world.Errorf(world.ErrUnavailable, "World down is unavailable")
	}
	if w, ok := f[id]; ok {
		return w, nil
	}
	return nil, world.Errorf(world.ErrNotFound, "Unknown world: %s", id)
}

func (f fakeWorlds) List(context.Context) ([]world.Info, error) {
	var out []world.Info
	for id := range f {
		out = append(out, world.Info{ClientID: id})
	}
	return out, nil
}

func (f fakeWorlds) IDs(context.Context) ([]string, error) {
	return slices.Sorted(maps.Keys(f)), nil
}

func newWorld(id string) *fakeWorld {
	return &fakeWorld{
		id: id,
		users: []world.User{
			{ID: "gm00000000000001", Name: "Gamemaster", Role: world.RoleGamemaster},
			{ID: "alice00000000001", Name: "Alice", Role: world.RolePlayer},
			{ID: "tess000000000001", Name: "Tess", Role: world.RoleTrusted},
		},
		perms: map[string]world.Role{world.PermissionFilesBrowse: world.RoleTrusted},
	}
}

// testChain is a chain over two worlds and a few keys.
func testChain(t *testing.T, worlds fakeWorlds) *Chain {
	t.Helper()
	policies, err := LoadPolicies()
	if err != nil {
		t.Fatal(err)
	}
	all := keys.AllScopes
	return &Chain{
		Policies: policies,
		Keys: fakeKeys{
			"all":      {ID: "k-all", Scopes: all, Enabled: true},
			"readonly": {ID: "k-ro", Scopes: []string{"entity:read"}, Enabled: true},
			"disabled": {ID: "k-off", Scopes: all, Enabled: false},
			"bound-a":  {ID: "k-a", Scopes: all, Enabled: true, ClientIDs: []string{"a"}},
			"bound-ab": {ID: "k-ab", Scopes: all, Enabled: true, ClientIDs: []string{"a", "b"}},
			"as-alice": {ID: "k-alice", Scopes: all, Enabled: true, ScopedUserID: "Alice"},
			"per-world": {ID: "k-pw", Scopes: all, Enabled: true, ClientIDs: []string{"a", "b"},
				ScopedUserID: "Tess", ClientUsers: map[string]string{"a": "alice00000000001"}},
		},
		Worlds:     worlds,
		RequestIDs: NewRequestIDs(7, nil),
		Log:        slog.New(slog.DiscardHandler),
	}
}

// invoke runs a unary call through the whole chain and returns the Call the
// handler saw.
func invoke(t *testing.T, c *Chain, method, apiKey string, req any) (*Call, error) {
	t.Helper()
	var seen *Call
	handler := func(ctx context.Context, _ any) (any, error) {
		seen = CallFrom(ctx)
		return "ok", nil
	}
	interceptors := c.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: method}
	var next grpc.UnaryHandler = handler
	for i := len(interceptors) - 1; i >= 0; i-- {
		ic, inner := interceptors[i], next
		next = func(ctx context.Context, req any) (any, error) { return ic(ctx, req, info, inner) }
	}
	ctx := context.Background()
	if apiKey != "" {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(wire.APIKeyHeader, apiKey))
	}
	_, err := next(ctx, req)
	return seen, err
}

const (
	getMethod    = "/relay.v1.DocumentService/GetDocument"
	folderMethod = "/relay.v1.FolderService/CreateFolder"
	filesMethod  = "/relay.v1.FileService/ListFiles"
	keysMethod   = "/relay.v1.KeyService/ListKeys"
)

func TestAuthenticationAndScope(t *testing.T) {
	t.Parallel()
	c := testChain(t, fakeWorlds{"a": newWorld("a")})
	tests := []struct {
		name, method, key string
		code              codes.Code
		msg               string
	}{
		{"no key", getMethod, "", codes.Unauthenticated, "API key is required"},
		{"unknown key", getMethod, "nope", codes.Unauthenticated, "Invalid API key"},
		{"disabled key", getMethod, "disabled", codes.Unauthenticated, "API key is disabled"},
		{"missing scope", folderMethod, "readonly", codes.PermissionDenied, "API key lacks required scope: structure:write"},
		{"method without policy", "/relay.v1.DocumentService/Nope", "all", codes.PermissionDenied, "Method /relay.v1.DocumentService/Nope has no access policy"},
		{"admin scope missing", keysMethod, "readonly", codes.PermissionDenied, "API key lacks required scope: admin"},
		{"admin ok", keysMethod, "all", codes.OK, ""},
		{"health needs no key", "/grpc.health.v1.Health/Check", "", codes.OK, ""},
		{"scope ok", getMethod, "readonly", codes.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := invoke(t, c, tt.method, tt.key, &relayv1.GetDocumentRequest{})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
			}
			if tt.msg != "" && status.Convert(err).Message() != tt.msg {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tt.msg)
			}
		})
	}
}

func TestWorldResolution(t *testing.T) {
	t.Parallel()
	two := fakeWorlds{"a": newWorld("a"), "b": newWorld("b")}
	one := fakeWorlds{"a": newWorld("a")}
	tests := []struct {
		name     string
		worlds   fakeWorlds
		key      string
		clientID string
		want     string
		code     codes.Code
		msg      string
	}{
		{"explicit", two, "all", "b", "b", codes.OK, ""},
		{"unknown world", two, "all", "zz", "", codes.NotFound, "Unknown world: zz"},
		{"world unavailable", two, "all", "down", "", codes.Unavailable, "World down is unavailable"},
		{"only world of the relay", one, "all", "", "a", codes.OK, ""},
		{"several worlds need clientId", two, "all", "", "", codes.InvalidArgument, "'clientId' is required"},
		{"key bound to one world", two, "bound-a", "", "a", codes.OK, ""},
		{"key bound elsewhere", two, "bound-a", "b", "", codes.PermissionDenied, "API key is not authorized for client 'b'"},
		{"key bound to several, none given", two, "bound-ab", "", "", codes.InvalidArgument, "'clientId' is required: this API key is bound to several worlds (a, b)"},
		{"key bound to several, one given", two, "bound-ab", "b", "b", codes.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := testChain(t, tt.worlds)
			call, err := invoke(t, c, getMethod, tt.key, &relayv1.GetDocumentRequest{ClientId: tt.clientID})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
			}
			if tt.msg != "" && status.Convert(err).Message() != tt.msg {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tt.msg)
			}
			if tt.code == codes.OK && call.World.Info().ClientID != tt.want {
				t.Fatalf("world = %q, want %q", call.World.Info().ClientID, tt.want)
			}
		})
	}
}

func TestUserResolution(t *testing.T) {
	t.Parallel()
	worlds := fakeWorlds{"a": newWorld("a"), "b": newWorld("b")}
	c := testChain(t, worlds)
	tests := []struct {
		name     string
		key      string
		clientID string
		userID   string
		want     string // user name, "" for GM-level access
		code     codes.Code
		msg      string
	}{
		{"no user is GM-level access", "all", "a", "", "", codes.OK, ""},
		{"by id", "all", "a", "alice00000000001", "Alice", codes.OK, ""},
		{"by name, any case", "all", "a", "aLiCe", "Alice", codes.OK, ""},
		{"unknown user", "all", "a", "Mallory", "", codes.InvalidArgument, "User not found: Mallory"},
		{"injected user", "as-alice", "a", "", "Alice", codes.OK, ""},
		{"injected user, same user given", "as-alice", "a", "alice00000000001", "Alice", codes.OK, ""},
		{"injected user cannot be replaced", "as-alice", "a", "Gamemaster", "", codes.PermissionDenied, "This API key acts as user 'Alice' and cannot act as 'Gamemaster'"},
		{"per-world user wins", "per-world", "a", "", "Alice", codes.OK, ""},
		{"global user elsewhere", "per-world", "b", "", "Tess", codes.OK, ""},
		{"per-world user cannot be replaced", "per-world", "a", "Tess", "", codes.PermissionDenied, "This API key acts as user 'Alice' and cannot act as 'Tess'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			call, err := invoke(t, c, getMethod, tt.key, &relayv1.GetDocumentRequest{ClientId: tt.clientID, UserId: tt.userID})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
			}
			if tt.msg != "" && status.Convert(err).Message() != tt.msg {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tt.msg)
			}
			if tt.code != codes.OK {
				return
			}
			got := ""
			if call.User != nil {
				got = call.User.Name
			}
			if got != tt.want {
				t.Fatalf("user = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	c := testChain(t, fakeWorlds{"a": newWorld("a")})
	tests := []struct {
		name, method, userID string
		code                 codes.Code
		msg                  string
	}{
		{"GM-only refused to a player", folderMethod, "Alice", codes.PermissionDenied, "User 'Alice' must be a GM to create folders"},
		{"GM-only allowed to a GM", folderMethod, "Gamemaster", codes.OK, ""},
		{"GM-only allowed without user", folderMethod, "", codes.OK, ""},
		{"execute-js wording", "/relay.v1.ScriptService/ExecuteJs", "Alice", codes.PermissionDenied, "User 'Alice' must be a GM to execute JavaScript"},
		{"world permission refused", filesMethod, "Alice", codes.PermissionDenied, "User 'Alice' does not have 'FILES_BROWSE' permission required to browse the file system"},
		{"world permission held", filesMethod, "Tess", codes.OK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := invoke(t, c, tt.method, "all", &relayv1.GetDocumentRequest{UserId: tt.userID})
			if got := status.Code(err); got != tt.code {
				t.Fatalf("code = %v, want %v (err %v)", got, tt.code, err)
			}
			if tt.msg != "" && status.Convert(err).Message() != tt.msg {
				t.Fatalf("message = %q, want %q", status.Convert(err).Message(), tt.msg)
			}
		})
	}
}

func TestRequestIDs(t *testing.T) {
	t.Parallel()
	c := testChain(t, fakeWorlds{"a": newWorld("a")})
	call, err := invoke(t, c, getMethod, "all", &relayv1.GetDocumentRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^entity_\d+$`).MatchString(call.RequestID) {
		t.Fatalf("request id %q is not entity_<digits>", call.RequestID)
	}
	seen := map[string]bool{}
	g := NewRequestIDs(-1, nil)
	for range 100_000 {
		id := g.New("x")
		if seen[id] {
			t.Fatalf("duplicate request id %s", id)
		}
		seen[id] = true
	}
}

func TestPanicBecomesInternal(t *testing.T) {
	t.Parallel()
	c := testChain(t, fakeWorlds{"a": newWorld("a")})
	_, err := c.recoverUnary(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: getMethod},
		func(context.Context, any) (any, error) { panic("boom") })
	if status.Code(err) != codes.Internal || status.Convert(err).Message() != "Internal error" {
		t.Fatalf("err = %v, want Internal error", err)
	}
}
