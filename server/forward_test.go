package server_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	spb "google.golang.org/genproto/googleapis/rpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
)

// TestServeForwardedRefusesWorldlessMethods: a forwarded call may only be
// a call for a world; a key administration call (or an unknown method)
// that arrives as forwarded is refused before it runs with the identity
// it claims.
func TestServeForwardedRefusesWorldlessMethods(t *testing.T) {
	store, err := keys.Open(filepath.Join(t.TempDir(), "relay.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv, err := server.New(server.Config{Keys: store, Worlds: registry{}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := proto.Marshal(&relayv1.CreateKeyRequest{Name: "forged", Scopes: []string{keys.ScopeAdmin}})
	admin := keys.Key{ID: "admin", Scopes: keys.AllScopes, Enabled: true}
	for _, method := range []string{relayv1.KeyService_CreateKey_FullMethodName, "/relay.v1.Nope/Nope"} {
		rep := srv.ServeForwarded(context.Background(), &server.ForwardedCall{Method: method, ClientID: "demo", Key: admin, Request: req})
		st := new(spb.Status)
		if rep.Status == nil || proto.Unmarshal(rep.Status, st) != nil || codes.Code(st.GetCode()) != codes.PermissionDenied {
			t.Fatalf("%s: %+v", method, status.FromProto(st))
		}
	}
}
