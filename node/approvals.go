package node

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/link"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/wire"
)

// approverScope is the scope a key needs to approve key requests and pair
// requests: the scope of key administration and of pairing codes, which
// an approval uses.
const approverScope = "admin"

// approvals approves key requests and pair requests (link.Approvals) by
// calling the relay's own services in process with the approver's API
// key: the key of a key request is made by KeyService.CreateKey and the
// pairing code of a pair request by LinkService.CreatePairingCode, through
// the same interceptors as the approver's own calls to `POST /keys` and
// `POST /pairing-codes`. What an approval grants is therefore whatever
// that key could grant itself, and no more.
type approvals struct{ r *Node }

var _ link.Approvals = approvals{}

// Approver implements link.Approvals.
func (a approvals) Approver(ctx context.Context, apiKey string) (string, string, error) {
	if apiKey == "" {
		return "", "", &link.Refusal{Status: http.StatusUnauthorized, Msg: keys.ErrMissing.Error()}
	}
	// A console session approves as its account's admin.
	k, err := a.r.authKeys.Authenticate(ctx, apiKey)
	if errors.Is(err, keys.ErrSuspended) {
		// A known key of a suspended account: refused as on every route.
		return "", "", &link.Refusal{Status: http.StatusForbidden, Msg: err.Error()}
	}
	if err != nil {
		return "", "", &link.Refusal{Status: http.StatusUnauthorized, Msg: err.Error()}
	}
	if !k.HasScope(approverScope) {
		return "", "", &link.Refusal{Status: http.StatusForbidden, Msg: "API key lacks required scope: " + approverScope}
	}
	return k.ID, k.Account(), nil
}

// withKey is ctx carrying apiKey as an in-process call's credentials.
func withKey(ctx context.Context, apiKey string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, wire.APIKeyHeader, apiKey)
}

// refusal turns a service's error into the HTTP refusal the REST gateway
// would answer for it.
func refusal(err error) error {
	st := status.Convert(err)
	if st.Code() == codes.OK {
		return nil
	}
	return &link.Refusal{Status: runtime.HTTPStatusFromCode(st.Code()), Msg: st.Message()}
}

// CreateKey implements link.Approvals.
func (a approvals) CreateKey(ctx context.Context, apiKey string, g link.KeyGrant) (string, string, error) {
	req := &relayv1.CreateKeyRequest{Name: g.Name, Scopes: g.Scopes, ClientIds: g.ClientIDs, ScopedUserId: g.UserID}
	if !g.ExpiresAt.IsZero() {
		req.ExpiresAt = g.ExpiresAt.UTC().Format(time.RFC3339)
	}
	resp, err := relayv1.NewKeyServiceClient(a.r.grpc.Local).CreateKey(withKey(ctx, apiKey), req)
	if err != nil {
		return "", "", refusal(err)
	}
	return resp.GetApiKey().GetId(), resp.GetKey(), nil
}

// CreatePairingCode implements link.Approvals.
func (a approvals) CreatePairingCode(ctx context.Context, apiKey, clientID string) (string, error) {
	resp, err := relayv1.NewLinkServiceClient(a.r.grpc.Local).CreatePairingCode(withKey(ctx, apiKey), &relayv1.CreatePairingCodeRequest{ClientId: clientID})
	if err != nil {
		return "", refusal(err)
	}
	return resp.GetCode(), nil
}
