package shared

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/link"
)

// RequestsBucket keeps the key requests and pair requests. They last
// minutes, so JetStream forgets each entry requestsMaxAge after its last
// write: long enough for the request to live, to be delivered once
// approved, and to be answered as expired for a while after.
const RequestsBucket = "relay_requests"

// requestsMaxAge covers a request's life (link.RequestTTL), the time its
// asker has to fetch it once approved (as long again) and the time it is
// remembered as expired (as long again), with a margin for clocks that
// differ a little between nodes.
const requestsMaxAge = 3*link.RequestTTL + time.Minute

// RequestStore keeps key requests and pair requests in a JetStream
// key-value bucket shared by every node, so that a request opened through
// one node may be approved through another and polled through a third. It
// implements link.RequestStore; entries are "r.<hash of the code>", and
// every update is a compare-and-set on the entry's revision.
//
// An approved request holds what its asker fetches (an API key or a
// pairing code) until it is fetched; the bucket keeps it no longer than
// requestsMaxAge, and the relay erases it from the entry when it is
// delivered.
type RequestStore struct {
	kv jetstream.KeyValue
}

var _ link.RequestStore = (*RequestStore)(nil)

// OpenRequests opens (creating if needed) the bucket of the requests.
func OpenRequests(ctx context.Context, js jetstream.JetStream, opts Options) (*RequestStore, error) {
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      RequestsBucket,
		Description: "relay key requests and pair requests (by the hash of their code)",
		History:     1,
		TTL:         requestsMaxAge,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	return &RequestStore{kv: kv}, nil
}

// SaveRequest implements link.RequestStore.
func (s *RequestStore) SaveRequest(ctx context.Context, h link.Hash, r link.Request) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Create(ctx, "r."+hexOf(h), data); err != nil {
		return fmt.Errorf("shared: save request: %w", err)
	}
	return nil
}

// Request implements link.RequestStore.
func (s *RequestStore) Request(ctx context.Context, h link.Hash) (link.Request, uint64, error) {
	e, err := s.kv.Get(ctx, "r."+hexOf(h))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return link.Request{}, 0, link.ErrUnknownRequest
	}
	if err != nil {
		return link.Request{}, 0, fmt.Errorf("shared: read request: %w", err)
	}
	var r link.Request
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return link.Request{}, 0, fmt.Errorf("shared: read request: %w", err)
	}
	return r, e.Revision(), nil
}

// UpdateRequest implements link.RequestStore.
func (s *RequestStore) UpdateRequest(ctx context.Context, h link.Hash, r link.Request, rev uint64) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := s.kv.Update(ctx, "r."+hexOf(h), data, rev); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return link.ErrRequestChanged
		}
		return fmt.Errorf("shared: update request: %w", err)
	}
	return nil
}
