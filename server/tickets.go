package server

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
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
// Only hashes of tickets are kept, in a [TicketStore]: on a single node in
// memory (a relay restart ends them all), in a cluster in a store shared by
// every node, so that a browser may reconnect through any node.
type Tickets struct {
	now func() time.Time
	// lookup re-reads a key by id at redemption; nil trusts the record
	// captured when the ticket was issued.
	lookup func(ctx context.Context, id string) (keys.Key, error)
	store  TicketStore
}

// TicketHash is the SHA-256 of a stream ticket, under which it is kept.
type TicketHash = [sha256.Size]byte

// Errors of a [TicketStore].
var (
	// ErrTicketUnknown reports a ticket that is unknown or lapsed.
	ErrTicketUnknown = errors.New("stream ticket unknown or lapsed")
	// ErrTicketOtherStream reports a ticket presented for a stream other
	// than the one it is bound to.
	ErrTicketOtherStream = errors.New("stream ticket bound to another stream")
)

// TicketStore keeps issued stream tickets by hash. Each method is one
// atomic step, so that a store shared by several relay nodes can
// implement it.
type TicketStore interface {
	// Add stores a new ticket standing for key, whose first stream must
	// open before expires.
	Add(ctx context.Context, h TicketHash, key keys.Key, expires time.Time) error
	// Find returns the key a ticket stands for, as it was issued, when the
	// ticket is live at now; ErrTicketUnknown otherwise.
	Find(ctx context.Context, h TicketHash, now time.Time) (keys.Key, error)
	// Open binds the ticket to stream on its first use and refuses any
	// other stream (ErrTicketOtherStream) or a lapsed ticket
	// (ErrTicketUnknown). The ticket then stays live while the stream is
	// open, until closed is called (exactly once), and for window after.
	Open(ctx context.Context, h TicketHash, stream string, window time.Duration) (closed func(), err error)
}

// NewTickets returns an empty ticket store kept in memory. lookup, when
// not nil, re-reads a key by id when one of its tickets is redeemed.
func NewTickets(now func() time.Time, lookup func(ctx context.Context, id string) (keys.Key, error)) *Tickets {
	return NewTicketsIn(nil, now, lookup)
}

// NewTicketsIn returns the tickets kept in store (in memory when nil), as
// NewTickets does.
func NewTicketsIn(store TicketStore, now func() time.Time, lookup func(ctx context.Context, id string) (keys.Key, error)) *Tickets {
	if now == nil {
		now = time.Now
	}
	if store == nil {
		store = &memTickets{now: now, tickets: map[TicketHash]*ticket{}}
	}
	return &Tickets{now: now, lookup: lookup, store: store}
}

// Issue returns a new ticket for key and the deadline of its first use.
func (t *Tickets) Issue(ctx context.Context, key keys.Key) (string, time.Time, error) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", time.Time{}, err
	}
	plain := ticketPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	expires := t.now().Add(StreamTicketTTL)
	if err := t.store.Add(ctx, sha256.Sum256([]byte(plain)), key, expires); err != nil {
		return "", time.Time{}, err
	}
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
	hash    TicketHash
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
func (t *Tickets) find(ctx context.Context, plain string) (TicketHash, keys.Key, error) {
	if !strings.HasPrefix(plain, ticketPrefix) {
		return TicketHash{}, keys.Key{}, errBadTicket
	}
	h := sha256.Sum256([]byte(plain))
	now := t.now()
	key, err := t.store.Find(ctx, h, now)
	if err != nil {
		return h, keys.Key{}, ticketStoreError(err)
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
func (u *TicketUse) Open(ctx context.Context, stream string) (closed func(), err error) {
	closed, err = u.tickets.store.Open(ctx, u.hash, stream, StreamTicketReconnectWindow)
	switch {
	case errors.Is(err, ErrTicketOtherStream):
		return nil, errOtherStream
	case err != nil:
		return nil, ticketStoreError(err)
	}
	return closed, nil
}

// ticketStoreError is the answer for a ticket the store could not find or
// bind: the one answer for an unknown or lapsed ticket, or, when the store
// itself failed (a cluster's tickets bucket electing a new leader after a
// node died), Unavailable, so that the client tries again with the same
// ticket instead of dropping a ticket that may well be valid.
func ticketStoreError(err error) error {
	if errors.Is(err, ErrTicketUnknown) {
		return errBadTicket
	}
	return status.Error(codes.Unavailable, "Stream tickets cannot be checked at the moment: try again shortly")
}

// memTickets is the single node's [TicketStore]: a map in memory.
type memTickets struct {
	now func() time.Time

	mu      sync.Mutex
	tickets map[TicketHash]*ticket
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

// Add implements [TicketStore].
func (m *memTickets) Add(_ context.Context, h TicketHash, key keys.Key, expires time.Time) error {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for h, tk := range m.tickets { // drop the lapsed ones; the map stays small
		if !tk.live(now) {
			delete(m.tickets, h)
		}
	}
	m.tickets[h] = &ticket{key: key, expires: expires}
	return nil
}

// Find implements [TicketStore].
func (m *memTickets) Find(_ context.Context, h TicketHash, now time.Time) (keys.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tk, ok := m.tickets[h]
	if !ok || !tk.live(now) {
		return keys.Key{}, ErrTicketUnknown
	}
	return tk.key, nil
}

// Open implements [TicketStore].
func (m *memTickets) Open(_ context.Context, h TicketHash, stream string, window time.Duration) (func(), error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	tk, ok := m.tickets[h]
	switch {
	case !ok || !tk.live(m.now()):
		return nil, ErrTicketUnknown
	case tk.stream == "":
		tk.stream = stream
	case tk.stream != stream:
		return nil, ErrTicketOtherStream
	}
	tk.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			m.mu.Lock()
			defer m.mu.Unlock()
			if tk.open--; tk.open == 0 {
				tk.expires = m.now().Add(window)
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
	plain, expires, err := s.tickets.Issue(ctx, CallFrom(ctx).Key)
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
