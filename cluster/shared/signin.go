package shared

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/server/signin"
)

// SigninBucket keeps the accounts' password hashes, the console's
// sessions and the invites to sign up, so that a session opened through
// one node is accepted by every node and an invite is used once in the
// whole cluster. Entries are "p.<account>", "s.<account>.<session>" and
// "i.<invite>" (see package signin); every change is a compare-and-set on
// the entry's revision.
const SigninBucket = "relay_signin"

// SigninStore is signin.KV over the cluster's bucket.
type SigninStore struct {
	kv jetstream.KeyValue
}

var _ signin.KV = (*SigninStore)(nil)

// OpenSignin opens (creating if needed) the bucket of the sign-in state.
func OpenSignin(ctx context.Context, js jetstream.JetStream, opts Options) (*SigninStore, error) {
	kv, err := openBucket(ctx, js, opts.Replicas, jetstream.KeyValueConfig{
		Bucket:      SigninBucket,
		Description: "relay passwords (argon2id hashes), console sessions and invites (by hash)",
		History:     1,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, err
	}
	return &SigninStore{kv: kv}, nil
}

// Get implements signin.KV.
func (s *SigninStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, signin.ErrNoEntry
	}
	if err != nil {
		return nil, 0, fmt.Errorf("shared: read %s: %w", key, err)
	}
	return e.Value(), e.Revision(), nil
}

// Create implements signin.KV.
func (s *SigninStore) Create(ctx context.Context, key string, value []byte) error {
	_, err := s.kv.Create(ctx, key, value)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return signin.ErrEntryExists
	}
	if err != nil {
		return fmt.Errorf("shared: create %s: %w", key, err)
	}
	return nil
}

// Update implements signin.KV.
func (s *SigninStore) Update(ctx context.Context, key string, value []byte, revision uint64) error {
	_, err := s.kv.Update(ctx, key, value, revision)
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyNotFound) || isWrongSequence(err) {
		return signin.ErrChanged
	}
	if err != nil {
		return fmt.Errorf("shared: update %s: %w", key, err)
	}
	return nil
}

// isWrongSequence reports JetStream's refusal of a compare-and-set whose
// revision is not the entry's last.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Delete implements signin.KV.
func (s *SigninStore) Delete(ctx context.Context, key string) error {
	if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("shared: delete %s: %w", key, err)
	}
	return nil
}

// Keys implements signin.KV.
func (s *SigninStore) Keys(ctx context.Context, prefix string) ([]string, error) {
	lister, err := s.kv.ListKeysFiltered(ctx, prefix+">")
	if err != nil {
		return nil, fmt.Errorf("shared: list %s: %w", prefix, err)
	}
	// The lister stops its watcher itself once it has listed every key
	// (or ctx ended): the channel closes then.
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("shared: list %s: %w", prefix, err)
	}
	return out, nil
}
