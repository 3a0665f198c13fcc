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

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
)

// StreamTicketTTL is how long a new stream ticket waits for its first
// stream.
const StreamTicketTTL = 60 * time.Second

// StreamTicketReconnectWindow is how long a used ticket stays valid after
// the last stream opened with it closed, so that a browser's EventSource
// can reconnect by itself after a network drop.
const StreamTicketReconnectWindow = 60 * time.Second

// ticketPrefix starts every stream ticket, so a ticket is never mistaken
// for an API key (which starts with `rk_`).
const ticketPrefix = "st_"

// Tickets issues and redeems stream tickets: stand-ins for an API key, for
// browsers whose EventSource cannot send headers.
//
// A ticket lives in three stages. A new ticket has StreamTicketTTL to open
// its first stream, on any of the event streams. Its first stream binds it:
// from then on it opens only that stream (the same endpoint, world, user
// and filters; only the resume point may differ), which is what an
// EventSource does when it reconnects with Last-Event-ID. It stays valid
// while a stream opened with it is open and for
// StreamTicketReconnectWindow after the last one closed; then it is gone.
// Whoever holds the ticket may reopen that one stream in that time, and only
// as the key that asked for it: every use reads the key again, so a key
// revoked, disabled or expired in the meantime makes its tickets worthless.
// Only hashes of tickets are kept, in memory: a relay restart ends them all.
type Tickets struct {
	now func() time.Time
	// lookup re-reads a key by id at redemption; nil trusts the record
	// captured when the ticket was issued.
	lookup func(ctx context.Context, id string) (keys.Key, error)

	mu      sync.Mutex
	tickets map[[sha256.Size]byte]*ticket
}

// ticket is an issued ticket.
type ticket struct {
	key keys.Key
	// expires is when the ticket lapses unless a stream is open with it:
	// the first-use deadline, then the end of the reconnect window.
	expires time.Time
	// stream names the stream the ticket is bound to; empty until its
	// first stream opens.
	stream string
	// open counts the streams open with the ticket.
	open int
}

// live reports whether the ticket may still be used at now.
func (tk *ticket) live(now time.Time) bool {
	return tk.open > 0 || now.Before(tk.expires)
}

// NewTickets returns an empty ticket store. lookup, when not nil, re-reads
// a key by id when one of its tickets is redeemed.
func NewTickets(now func() time.Time, lookup func(ctx context.Context, id string) (keys.Key, error)) *Tickets {
	if now == nil {
		now = time.Now
	}
	return &Tickets{now: now, lookup: lookup, tickets: map[[sha256.Size]byte]*ticket{}}
}

// Issue returns a new ticket for key and the deadline of its first use.
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
	for h, tk := range t.tickets { // drop the lapsed ones; the map stays small
		if !tk.live(now) {
			delete(t.tickets, h)
		}
	}
	t.tickets[sha256.Sum256([]byte(plain))] = &ticket{key: key, expires: expires}
	return plain, expires, nil
}

// errBadTicket is the one answer for a ticket that is unknown or lapsed: a
// caller learns nothing about which.
var errBadTicket = status.Error(codes.Unauthenticated, "Invalid or expired stream ticket")

// errOtherStream refuses a ticket presented for a stream other than the
// one it is bound to.
var errOtherStream = status.Error(codes.Unauthenticated,
	"This stream ticket belongs to another stream: a ticket reopens only the stream it was first used for (the same endpoint, world, user and filters); get a new ticket for this one")

// TicketUse is a redeemed ticket, carried by its stream's call until the
// stream opens (see [TicketUse.Open]).
type TicketUse struct {
	tickets *Tickets
	hash    [sha256.Size]byte
}

// Redeem checks a ticket and returns the key it stands for, with the use
// that binds the ticket to its stream once the stream is about to open.
func (t *Tickets) Redeem(ctx context.Context, plain string) (keys.Key, *TicketUse, error) {
	h, key, err := t.find(ctx, plain)
	if err != nil {
		return keys.Key{}, nil, err
	}
	return key, &TicketUse{tickets: t, hash: h}, nil
}

// Check reports whether a ticket would be redeemed now: the relay admits a
// stream's request with it before reading anything else, and redeems it
// when the stream's call runs.
func (t *Tickets) Check(ctx context.Context, plain string) error {
	_, _, err := t.find(ctx, plain)
	return err
}

// find looks a ticket up and checks the key it stands for.
func (t *Tickets) find(ctx context.Context, plain string) ([sha256.Size]byte, keys.Key, error) {
	if !strings.HasPrefix(plain, ticketPrefix) {
		return [sha256.Size]byte{}, keys.Key{}, errBadTicket
	}
	h := sha256.Sum256([]byte(plain))
	now := t.now()
	t.mu.Lock()
	tk, ok := t.tickets[h]
	var key keys.Key
	if ok && tk.live(now) {
		key = tk.key
	} else {
		ok = false
	}
	t.mu.Unlock()
	if !ok {
		return h, keys.Key{}, errBadTicket
	}
	if t.lookup != nil {
		current, err := t.lookup(ctx, key.ID)
		if err != nil {
			return h, keys.Key{}, errBadTicket
		}
		key = current
	}
	switch {
	case key.Revoked():
		return h, keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrRevoked.Error())
	case !key.Enabled:
		return h, keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrDisabled.Error())
	case key.Expired(now):
		return h, keys.Key{}, status.Error(codes.Unauthenticated, keys.ErrExpired.Error())
	}
	return h, key, nil
}

// Open binds the ticket to stream (an opaque name of the stream: its
// endpoint, world, user and filters) on its first use, refuses it for any
// other stream, and counts the stream as open with it until the returned
// function is called, which must happen exactly once, when the stream ends.
func (u *TicketUse) Open(stream string) (closed func(), err error) {
	t := u.tickets
	t.mu.Lock()
	defer t.mu.Unlock()
	tk, ok := t.tickets[u.hash]
	switch {
	case !ok || !tk.live(t.now()):
		return nil, errBadTicket
	case tk.stream == "":
		tk.stream = stream
	case tk.stream != stream:
		return nil, errOtherStream
	}
	tk.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if tk.open--; tk.open == 0 {
				tk.expires = t.now().Add(StreamTicketReconnectWindow)
			}
		})
	}, nil
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
