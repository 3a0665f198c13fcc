package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "relay/gen/go/relay/v1"
	"relay/server/keys"
)

// StreamTicketTTL is how long a stream ticket stays valid.
const StreamTicketTTL = 60 * time.Second

// ticketPrefix starts every stream ticket, so a ticket is never mistaken
// for an API key (which starts with `rk_`).
const ticketPrefix = "st_"

// Tickets issues and redeems stream tickets: short-lived, single-use
// stand-ins for an API key, for browsers whose EventSource cannot send
// headers. Only hashes of tickets are kept, in memory; a ticket is bound to
// the key that asked for it, and redeeming it checks that key again, so a
// key revoked in the meantime makes its tickets worthless.
type Tickets struct {
	now func() time.Time
	// lookup re-reads a key by id at redemption; nil trusts the record
	// captured when the ticket was issued.
	lookup func(ctx context.Context, id string) (keys.Key, error)

	mu      sync.Mutex
	tickets map[[sha256.Size]byte]ticket
}

// ticket is an issued, unused ticket.
type ticket struct {
	key     keys.Key
	expires time.Time
}

// NewTickets returns an empty ticket store. lookup, when not nil, re-reads
// a key by id when one of its tickets is redeemed.
func NewTickets(now func() time.Time, lookup func(ctx context.Context, id string) (keys.Key, error)) *Tickets {
	if now == nil {
		now = time.Now
	}
	return &Tickets{now: now, lookup: lookup, tickets: map[[sha256.Size]byte]ticket{}}
}

// Issue returns a new ticket for key and when it expires.
func (t *Tickets) Issue(key keys.Key) (string, time.Time, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, err
	}
	plain := ticketPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	now := t.now()
	expires := now.Add(StreamTicketTTL)
	t.mu.Lock()
	defer t.mu.Unlock()
	for h, tk := range t.tickets { // drop the expired ones; the map stays small
		if !now.Before(tk.expires) {
			delete(t.tickets, h)
		}
	}
	t.tickets[sha256.Sum256([]byte(plain))] = ticket{key: key, expires: expires}
	return plain, expires, nil
}

// errBadTicket is the one answer for a ticket that is unknown, used or
// expired: a caller learns nothing about which.
var errBadTicket = status.Error(codes.Unauthenticated, "Invalid or expired stream ticket")

// Redeem consumes a ticket and returns the key it stands for.
func (t *Tickets) Redeem(ctx context.Context, plain string) (keys.Key, error) {
	return t.find(ctx, plain, true)
}

// Check reports whether a ticket would be redeemed now, without consuming
// it: the relay admits a stream's request with it before reading anything
// else, and redeems it when the stream's call runs.
func (t *Tickets) Check(ctx context.Context, plain string) error {
	_, err := t.find(ctx, plain, false)
	return err
}

// find looks a ticket up, removing it when consume is set, and checks the
// key it stands for.
func (t *Tickets) find(ctx context.Context, plain string, consume bool) (keys.Key, error) {
	if !strings.HasPrefix(plain, ticketPrefix) {
		return keys.Key{}, errBadTicket
	}
	h := sha256.Sum256([]byte(plain))
	t.mu.Lock()
	tk, ok := t.tickets[h]
	if consume {
		delete(t.tickets, h)
	}
	t.mu.Unlock()
	now := t.now()
	if !ok || !now.Before(tk.expires) {
		return keys.Key{}, errBadTicket
	}
	key := tk.key
	if t.lookup != nil {
		current, err := t.lookup(ctx, key.ID)
		if err != nil {
			return keys.Key{}, errBadTicket
		}
		key = current
	}
	switch {
	case key.Revoked():
		return keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrRevoked.Error())
	case !key.Enabled:
		return keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrDisabled.Error())
	case key.Expired(now):
		return keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrExpired.Error())
	}
	return key, nil
}

// acceptsTicket reports whether a method may be authenticated with a
// stream ticket: the event streams only.
func acceptsTicket(method string) bool {
	switch method {
	case relayv1.EventService_SubscribeHooks_FullMethodName,
		relayv1.EventService_SubscribeEncounters_FullMethodName,
		relayv1.EventService_SubscribeActors_FullMethodName,
		relayv1.EventService_SubscribeScenes_FullMethodName:
		return true
	}
	return false
}

// ticketService implements relayv1.TicketServiceServer.
type ticketService struct {
	relayv1.UnimplementedTicketServiceServer
	tickets *Tickets
}

func (s ticketService) CreateStreamTicket(ctx context.Context, _ *relayv1.CreateStreamTicketRequest) (*relayv1.CreateStreamTicketResponse, error) {
	plain, expires, err := s.tickets.Issue(CallFrom(ctx).Key)
	if err != nil {
		return nil, err
	}
	return &relayv1.CreateStreamTicketResponse{
		Ticket:    plain,
		ExpiresIn: int32(StreamTicketTTL / time.Second),
		ExpiresAt: expires.UTC().Format(time.RFC3339),
	}, nil
}

// keyLookup returns the key store's lookup by id when it has one, so that
// a redeemed ticket sees its key as it is now.
func keyLookup(store any) func(ctx context.Context, id string) (keys.Key, error) {
	if g, ok := store.(interface {
		Get(ctx context.Context, id string) (keys.Key, error)
	}); ok {
		return g.Get
	}
	return nil
}
