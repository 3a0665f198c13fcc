package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/server/keys"
)

// ticketFixture is a ticket store on a settable clock whose one key can be
// changed (revoked, expired) between uses.
type ticketFixture struct {
	now     time.Time
	current keys.Key
	tickets *Tickets
}

func newTicketFixture() *ticketFixture {
	f := &ticketFixture{
		now:     time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC),
		current: keys.Key{ID: "k1", Enabled: true, Scopes: []string{keys.ScopeEventsSubscribe}},
	}
	lookup := func(_ context.Context, id string) (keys.Key, error) {
		if id != f.current.ID {
			return keys.Key{}, errors.New("no such key")
		}
		return f.current, nil
	}
	f.tickets = NewTickets(func() time.Time { return f.now }, lookup)
	return f
}

// open redeems a ticket and opens a stream with it.
func (f *ticketFixture) open(t *testing.T, plain, stream string) (func(), error) {
	t.Helper()
	key, use, err := f.tickets.Redeem(context.Background(), plain)
	if err != nil {
		return nil, err
	}
	if key.ID != f.current.ID {
		t.Fatalf("ticket stands for key %q", key.ID)
	}
	return use.Open(context.Background(), stream)
}

func isBadTicket(err error) bool {
	return status.Code(err) == codes.Unauthenticated && status.Convert(err).Message() == "Invalid or expired stream ticket"
}

func TestStreamTicketFirstUseDeadline(t *testing.T) {
	t.Parallel()
	f := newTicketFixture()
	plain, expires, err := f.tickets.Issue(context.Background(), f.current)
	if err != nil || !expires.Equal(f.now.Add(StreamTicketTTL)) {
		t.Fatalf("issue: %v %v", expires, err)
	}
	f.now = f.now.Add(StreamTicketTTL)
	if err := f.tickets.Check(context.Background(), plain); !isBadTicket(err) {
		t.Fatalf("a ticket unused past its first-use deadline: %v", err)
	}
	if _, err := f.open(t, plain, "a"); !isBadTicket(err) {
		t.Fatalf("a ticket unused past its first-use deadline opened a stream: %v", err)
	}
	if _, _, err := f.tickets.Redeem(context.Background(), "rk_not_a_ticket"); !isBadTicket(err) {
		t.Fatalf("an API key is not a ticket: %v", err)
	}
}

func TestStreamTicketReopensItsOwnStreamOnly(t *testing.T) {
	t.Parallel()
	f := newTicketFixture()
	plain, _, _ := f.tickets.Issue(context.Background(), f.current)
	closeFirst, err := f.open(t, plain, "actors demo Alice")
	if err != nil {
		t.Fatalf("first stream: %v", err)
	}
	// Another stream (other filters, another world or user, another
	// endpoint) is refused, whether or not the first is still open.
	if _, err := f.open(t, plain, "actors demo Bob"); status.Code(err) != codes.Unauthenticated || isBadTicket(err) {
		t.Fatalf("a ticket for another stream: %v", err)
	}
	// A reconnect while the server still holds the dropped stream open (it
	// notices the drop only at its next write) is accepted.
	closeSecond, err := f.open(t, plain, "actors demo Alice")
	if err != nil {
		t.Fatalf("a reconnect while the first stream is open: %v", err)
	}
	// While a stream is open the ticket does not lapse, however long.
	f.now = f.now.Add(10 * time.Hour)
	closeFirst()
	closeFirst() // closing twice counts once
	if err := f.tickets.Check(context.Background(), plain); err != nil {
		t.Fatalf("a ticket with an open stream: %v", err)
	}
	closeSecond()
	// Once no stream is open, it reopens its stream within the window...
	f.now = f.now.Add(StreamTicketReconnectWindow - time.Second)
	closeThird, err := f.open(t, plain, "actors demo Alice")
	if err != nil {
		t.Fatalf("a reconnect within the window: %v", err)
	}
	closeThird()
	// ...and not after it.
	f.now = f.now.Add(StreamTicketReconnectWindow)
	if _, err := f.open(t, plain, "actors demo Alice"); !isBadTicket(err) {
		t.Fatalf("a reconnect after the window: %v", err)
	}
}

func TestStreamTicketEndsWithItsKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(k *keys.Key, now time.Time)
		want   error
	}{
		{"revoked", func(k *keys.Key, now time.Time) { k.Enabled, k.RevokedAt = false, now }, keys.ErrRevoked},
		{"disabled", func(k *keys.Key, _ time.Time) { k.Enabled = false }, keys.ErrDisabled},
		{"expired", func(k *keys.Key, now time.Time) { k.ExpiresAt = now }, keys.ErrExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newTicketFixture()
			plain, _, _ := f.tickets.Issue(context.Background(), f.current)
			closed, err := f.open(t, plain, "s")
			if err != nil {
				t.Fatal(err)
			}
			defer closed()
			// Even with its stream open, a ticket is no better than its key
			// as it is now.
			tc.change(&f.current, f.now)
			if err := f.tickets.Check(context.Background(), plain); status.Convert(err).Message() != tc.want.Error() {
				t.Fatalf("admission: %v", err)
			}
			if _, err := f.open(t, plain, "s"); status.Convert(err).Message() != tc.want.Error() {
				t.Fatalf("reconnect: %v", err)
			}
		})
	}
}

func TestTicketsOnlyForEventStreams(t *testing.T) {
	t.Parallel()
	if !acceptsTicket("/relay.v1.EventService/SubscribeActors") || acceptsTicket("/relay.v1.DocumentService/GetDocument") {
		t.Fatal("tickets must be accepted by the event streams and nothing else")
	}
}

// failingTickets is a ticket store that cannot be reached (a cluster's
// tickets bucket without a leader), after the tickets were issued.
type failingTickets struct {
	TicketStore
	down bool
}

var errStoreDown = errors.New("no leader")

func (s *failingTickets) Find(ctx context.Context, h TicketHash, now time.Time) (keys.Key, error) {
	if s.down {
		return keys.Key{}, errStoreDown
	}
	return s.TicketStore.Find(ctx, h, now)
}

func (s *failingTickets) Open(ctx context.Context, h TicketHash, stream string, window time.Duration) (func(), error) {
	if s.down {
		return nil, errStoreDown
	}
	return s.TicketStore.Open(ctx, h, stream, window)
}

// A store that fails is Unavailable, not the answer for a bad ticket: the
// client must try the same ticket again rather than give it up.
func TestStreamTicketStoreDown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	key := keys.Key{ID: "k1", Enabled: true, Scopes: []string{keys.ScopeEventsSubscribe}}
	store := &failingTickets{TicketStore: NewTickets(func() time.Time { return now }, nil).store}
	tickets := NewTicketsIn(store, func() time.Time { return now }, func(context.Context, string) (keys.Key, error) { return key, nil })
	plain, _, err := tickets.Issue(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	_, use, err := tickets.Redeem(context.Background(), plain)
	if err != nil {
		t.Fatal(err)
	}
	store.down = true
	if _, err := use.Open(context.Background(), "a"); status.Code(err) != codes.Unavailable {
		t.Fatalf("open with the store down: %v", err)
	}
	if err := tickets.Check(context.Background(), plain); status.Code(err) != codes.Unavailable {
		t.Fatalf("check with the store down: %v", err)
	}
	store.down = false
	if err := tickets.Check(context.Background(), "st_unknown"); !isBadTicket(err) {
		t.Fatalf("an unknown ticket with the store up: %v", err)
	}
	if _, err := use.Open(context.Background(), "a"); err != nil {
		t.Fatalf("open once the store is back: %v", err)
	}
}
