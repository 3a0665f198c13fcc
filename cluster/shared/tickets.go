package shared

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/server"
	"github.com/tabletop-relay/relay/server/keys"
)

// TicketsBucket is the bucket of the stream tickets.
const TicketsBucket = "relay_tickets"

// ticketsMaxAge is how long the bucket keeps a ticket's entry after it was
// last written. Every ticket lapses much sooner (its first-use deadline,
// or its reconnect window after its streams' last renewal); the age only
// lets JetStream forget lapsed tickets.
const ticketsMaxAge = 10 * time.Minute

// TicketStore keeps the stream tickets in a JetStream key-value bucket, so
// that a browser may reconnect its event stream through any node. It
// implements server.TicketStore.
//
// A single node counts the streams open with a ticket; a cluster cannot,
// since a node may die with streams open. Instead, a stream open with a
// ticket renews the ticket's deadline every third of the reconnect window
// while it is open, and sets it to the end of the window when it closes:
// the ticket stays valid while a stream is open and for the window after
// the last one closed (or after its node died).
type TicketStore struct {
	kv    jetstream.KeyValue
	clock func() time.Time
	renew time.Duration // 0: a third of the window
}

var _ server.TicketStore = (*TicketStore)(nil)

// ticketRecord is a ticket as the bucket stores it, under "t.<hash>".
type ticketRecord struct {
	Key keys.Key `json:"key"`
	// Expires is when the ticket lapses: its first-use deadline, then the
	// end of its reconnect window.
	Expires time.Time `json:"expires"`
	// Stream is the stream the ticket is bound to; empty before its first
	// use.
	Stream string `json:"stream,omitempty"`
}

// OpenTickets opens (creating if needed) the tickets bucket.
func OpenTickets(ctx context.Context, js jetstream.JetStream, opts Options) (*TicketStore, error) {
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      TicketsBucket,
		Description: "relay stream tickets (hashes only)",
		History:     1,
		TTL:         ticketsMaxAge,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	s := &TicketStore{kv: kv, clock: time.Now, renew: opts.TicketRenewEvery}
	if opts.Clock != nil {
		s.clock = opts.Clock
	}
	return s, nil
}

func ticketEntry(h server.TicketHash) string { return "t." + hex.EncodeToString(h[:]) }

// Add implements server.TicketStore.
func (s *TicketStore) Add(ctx context.Context, h server.TicketHash, key keys.Key, expires time.Time) error {
	data, err := json.Marshal(ticketRecord{Key: key, Expires: expires})
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, ticketEntry(h), data); err != nil {
		return fmt.Errorf("shared: store stream ticket: %w", err)
	}
	return nil
}

// read returns a ticket's record and revision; ErrTicketUnknown when the
// bucket has none.
func (s *TicketStore) read(ctx context.Context, h server.TicketHash) (ticketRecord, uint64, error) {
	e, err := s.kv.Get(ctx, ticketEntry(h))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return ticketRecord{}, 0, server.ErrTicketUnknown
	}
	if err != nil {
		return ticketRecord{}, 0, fmt.Errorf("shared: read stream ticket: %w", err)
	}
	var rec ticketRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return ticketRecord{}, 0, fmt.Errorf("shared: read stream ticket: %w", err)
	}
	return rec, e.Revision(), nil
}

// Find implements server.TicketStore.
func (s *TicketStore) Find(ctx context.Context, h server.TicketHash, now time.Time) (keys.Key, error) {
	rec, _, err := s.read(ctx, h)
	if err != nil {
		return keys.Key{}, err
	}
	if !now.Before(rec.Expires) {
		return keys.Key{}, server.ErrTicketUnknown
	}
	return rec.Key, nil
}

// update applies change to a ticket's record with compare and set,
// reading again when another node changed it in between.
func (s *TicketStore) update(ctx context.Context, h server.TicketHash, change func(*ticketRecord) error) error {
	for {
		rec, rev, err := s.read(ctx, h)
		if err != nil {
			return err
		}
		if err := change(&rec); err != nil {
			return err
		}
		data, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = s.kv.Update(ctx, ticketEntry(h), data, rev)
		if errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists) {
			continue
		}
		return err
	}
}

// extend moves a ticket's deadline to until unless it is later already.
func (s *TicketStore) extend(ctx context.Context, h server.TicketHash, until time.Time) error {
	return s.update(ctx, h, func(rec *ticketRecord) error {
		if rec.Expires.Before(until) {
			rec.Expires = until
		}
		return nil
	})
}

// Open implements server.TicketStore: it binds the ticket on first use,
// then renews its deadline while the stream is open (see TicketStore).
func (s *TicketStore) Open(ctx context.Context, h server.TicketHash, stream string, window time.Duration) (func(), error) {
	err := s.update(ctx, h, func(rec *ticketRecord) error {
		now := s.clock()
		switch {
		case !now.Before(rec.Expires):
			return server.ErrTicketUnknown
		case rec.Stream == "":
			rec.Stream = stream
		case rec.Stream != stream:
			return server.ErrTicketOtherStream
		}
		if until := now.Add(window); rec.Expires.Before(until) {
			rec.Expires = until
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Stopping cancels a renewal under way: the stream has ended.
	stopped, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		every := s.renew
		if every <= 0 {
			every = window / 3
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-stopped.Done():
				return
			case <-t.C:
				rctx, cancel := context.WithTimeout(stopped, opTimeout)
				_ = s.extend(rctx, h, s.clock().Add(window))
				cancel()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			stop()
			<-done
			// The stream's last renewal: a courtesy, bounded so that a
			// stream ends at once even when NATS does not answer.
			rctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
			defer cancel()
			_ = s.extend(rctx, h, s.clock().Add(window))
		})
	}, nil
}
