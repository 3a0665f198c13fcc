package cluster

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Test hooks of the replicated worlds' snapshots, leases and file stores.

// HoldSnapshots keeps the node's snapshots of the worlds it follows from
// being stored until ReleaseSnapshots, as a slow upload would: a snapshot
// under way stays under way.
func (r *Registry) HoldSnapshots() { r.opts.Replication.holdSnapshots.Store(true) }

// ReleaseSnapshots lets the node's held snapshots be stored.
func (r *Registry) ReleaseSnapshots() { r.opts.Replication.holdSnapshots.Store(false) }

// MoveAside moves a world the node hosts out of its worlds, to where it
// would follow it, without giving up its lease: the state a claim round
// leaves when it claims a world again just as the node, replaced by
// another, moves its copy aside.
func (r *Registry) MoveAside(clientID string) error {
	rp := r.opts.Replication
	return rp.opts.Worlds.Evict(clientID, rp.copyDir(clientID))
}

// Rehost runs what the node does once it claimed a world of its own: it
// starts replicating it.
func (r *Registry) Rehost(clientID string) { r.opts.Replication.hosted(clientID) }

// flakyObjects is a world's object store whose next Puts fail as a store
// made a moment ago can: no server takes the request, after the upload
// read its first byte.
type flakyObjects struct {
	jetstream.ObjectStore
	fails atomic.Int32
}

func (o *flakyObjects) Put(ctx context.Context, meta jetstream.ObjectMeta, r io.Reader) (*jetstream.ObjectInfo, error) {
	if o.fails.Add(-1) >= 0 {
		_, _ = io.CopyN(io.Discard, r, 1)
		return nil, nats.ErrNoResponders
	}
	return o.ObjectStore.Put(ctx, meta, r)
}

// FailNextFilePuts makes the next n stores of a file of a world this node
// hosts find no server to take them; the world's object store must exist.
func (r *Registry) FailNextFilePuts(ctx context.Context, clientID string, n int) error {
	rp := r.opts.Replication
	obs, err := rp.fileObjects(ctx, clientID, false)
	if err != nil {
		return err
	}
	flaky := &flakyObjects{ObjectStore: obs}
	flaky.fails.Store(int32(n))
	rp.fileStores.Store(clientID, flaky)
	return nil
}
