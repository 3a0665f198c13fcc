package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"relay/server/keys"
)

func TestStreamTicketsAreShortLivedAndSingleUse(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	current := keys.Key{ID: "k1", Enabled: true, Scopes: []string{keys.ScopeEventsSubscribe}}
	lookup := func(_ context.Context, id string) (keys.Key, error) {
		if id != current.ID {
			return keys.Key{}, errors.New("no such key")
		}
		return current, nil
	}
	tk := NewTickets(func() time.Time { return now }, lookup)
	ctx := context.Background()

	plain, expires, err := tk.Issue(current)
	if err != nil || !expires.Equal(now.Add(StreamTicketTTL)) {
		t.Fatalf("issue: %v %v", expires, err)
	}
	if k, err := tk.Redeem(ctx, plain); err != nil || k.ID != "k1" {
		t.Fatalf("first use: %v %v", k, err)
	}
	if _, err := tk.Redeem(ctx, plain); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("second use: %v", err)
	}

	late, _, _ := tk.Issue(current)
	now = now.Add(StreamTicketTTL)
	if _, err := tk.Redeem(ctx, late); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("expired ticket: %v", err)
	}

	revoked, _, _ := tk.Issue(current)
	current.Enabled, current.RevokedAt = false, now
	if _, err := tk.Redeem(ctx, revoked); status.Convert(err).Message() != keys.ErrRevoked.Error() {
		t.Fatalf("ticket of a key revoked since: %v", err)
	}
	if _, err := tk.Redeem(ctx, "rk_not_a_ticket"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an API key is not a ticket: %v", err)
	}
}

func TestTicketsOnlyForEventStreams(t *testing.T) {
	t.Parallel()
	if !acceptsTicket("/relay.v1.EventService/SubscribeActors") || acceptsTicket("/relay.v1.DocumentService/GetDocument") {
		t.Fatal("tickets must be accepted by the event streams and nothing else")
	}
}
