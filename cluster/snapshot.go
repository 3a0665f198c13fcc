package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Snapshots of replicated worlds, and the trimming of their logs.
//
// A world's log would grow for ever, and a node that starts following a
// world would have to apply all of it. So one follower of each world (the
// first of its followers by rank, see Replication.ranked) stores a
// snapshot of its copy in the JetStream object store snapshotBucket once
// Config.SnapshotRecords records, or Config.SnapshotBytes bytes of
// records, were applied since the world's newest snapshot. A follower
// does it rather than the host: the host's CPU and disk serve the world's
// writes, and a follower's copy holds exactly the log up to its last
// applied record, so the snapshot is tagged with that record's sequence
// by construction (a lagging follower merely snapshots an older record).
//
// Each world keeps at most two snapshots, in two slots of the bucket
// (snapshotSlots), a new one replacing the older. After storing one, the
// follower purges the world's log below the older snapshot still kept,
// always leaving the log's last record, so the log holds at most about
// two snapshots' worth of records. Keeping the older snapshot lets a node
// that is downloading the newest one while the next is stored still find
// the records after it.
//
// A follower whose copy lacks records the log no longer holds (a new
// node, a node that returns with an empty data directory, a node that was
// down while the log was trimmed past its copy), or whose copy holds no
// whole world, restores the newest snapshot and applies the log from the
// record after it. Snapshots name the creation time of the log they were
// taken from, so that a snapshot of an earlier log of the same client id
// is never restored.

// snapshotBucket is the object store holding every world's snapshots.
const snapshotBucket = "relay_world_snapshots"

// snapshotSlots names the two objects that hold a world's snapshots.
func snapshotSlots(clientID string) [2]string {
	return [2]string{clientID + "/a", clientID + "/b"}
}

// Metadata of a snapshot object.
const (
	snapMetaClientID = "clientId"
	snapMetaSeq      = "seq"
	snapMetaLog      = "log" // the world stream's creation time, in Unix nanoseconds
	snapMetaNode     = "node"
)

// snapshotTimeout bounds storing one snapshot, and restoring one.
const snapshotTimeout = 10 * time.Minute

// snapshotRetry is how long a follower waits before it tries again after
// a snapshot failed.
const snapshotRetry = 10 * time.Second

// worldSnapshot is a stored snapshot of a world.
type worldSnapshot struct {
	slot string
	seq  uint64
	log  int64
	size uint64
}

// snapState is a follower's snapshot bookkeeping.
type snapState struct {
	// taker is set while this node is the one that snapshots the world.
	taker atomic.Bool
	// lastSeq is the sequence of the world's newest snapshot this node
	// knows of.
	lastSeq atomic.Uint64
	// sinceBytes counts the bytes of records applied since it.
	sinceBytes atomic.Int64
	// busy is set while a snapshot is being stored.
	busy atomic.Bool
	// retryAt (Unix nanoseconds) delays the next try after a failure.
	retryAt atomic.Int64
	// bg runs the uploads; the follower waits for it when it halts.
	bg sync.WaitGroup
	// restoreAt delays the next restore after a failed one; only the
	// follower's goroutine uses it.
	restoreAt time.Time
}

// logCreated identifies a world's log: its creation time.
func logCreated(info *jetstream.StreamInfo) int64 { return info.Created.UnixNano() }

// snapshotStore returns the snapshots' bucket, made the first time.
func (rp *Replication) snapshotStore(ctx context.Context) (jetstream.ObjectStore, error) {
	rp.mu.Lock()
	obs := rp.objects
	rp.mu.Unlock()
	if obs != nil {
		return obs, nil
	}
	obs, err := rp.node.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      snapshotBucket,
		Description: "relay: snapshots of the replicated embedded worlds, two a world",
		Replicas:    rp.node.Replicas(),
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: the snapshots' bucket: %w", err)
	}
	rp.mu.Lock()
	rp.objects = obs
	rp.mu.Unlock()
	return obs, nil
}

// forgetSnapshots removes a deleted world's snapshots, so that worlds
// made and deleted again and again leave nothing behind in the bucket.
func (rp *Replication) forgetSnapshots(ctx context.Context, clientID string) error {
	obs, err := rp.snapshotStore(ctx)
	if err != nil {
		return err
	}
	for _, slot := range snapshotSlots(clientID) {
		if err := obs.Delete(ctx, slot); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("cluster: remove snapshot %s of a deleted world: %w", slot, err)
		}
	}
	return nil
}

// worldSnapshots reads what the world's two slots hold, oldest first.
func (rp *Replication) worldSnapshots(ctx context.Context, obs jetstream.ObjectStore, clientID string) ([]worldSnapshot, error) {
	var out []worldSnapshot
	for _, slot := range snapshotSlots(clientID) {
		info, err := obs.GetInfo(ctx, slot)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if s, ok := parseSnapshot(info); ok && info.Metadata[snapMetaClientID] == clientID {
			out = append(out, s)
		}
	}
	if len(out) == 2 && out[0].seq > out[1].seq {
		out[0], out[1] = out[1], out[0]
	}
	return out, nil
}

// parseSnapshot reads a snapshot object's metadata.
func parseSnapshot(info *jetstream.ObjectInfo) (worldSnapshot, bool) {
	seq, err1 := strconv.ParseUint(info.Metadata[snapMetaSeq], 10, 64)
	created, err2 := strconv.ParseInt(info.Metadata[snapMetaLog], 10, 64)
	if err1 != nil || err2 != nil || info.Deleted {
		return worldSnapshot{}, false
	}
	return worldSnapshot{slot: info.Name, seq: seq, log: created, size: info.Size}, true
}

// usable reports whether a snapshot belongs to the log described by info
// and the log still holds every record after it.
func (s worldSnapshot) usable(info *jetstream.StreamInfo) bool {
	return s.log == logCreated(info) && s.seq <= info.State.LastSeq && s.seq+1 >= info.State.FirstSeq
}

// storeSnapshot stores the snapshot file at path, which holds the world's
// log up to record seq, in the slot of the world's older snapshot, then
// trims the log below the older snapshot still kept.
func (rp *Replication) storeSnapshot(ctx context.Context, clientID string, seq uint64, path string) error {
	began := time.Now()
	s, err := rp.node.js.Stream(ctx, worldStream(clientID))
	if err != nil {
		return err
	}
	info := s.CachedInfo()
	if seq > info.State.LastSeq {
		return fmt.Errorf("the copy holds record %d, the world's log ends at %d", seq, info.State.LastSeq)
	}
	obs, err := rp.snapshotStore(ctx)
	if err != nil {
		return err
	}
	snaps, err := rp.worldSnapshots(ctx, obs, clientID)
	if err != nil {
		return err
	}
	// The slot to write: an empty one, else one of an earlier log, else
	// the older snapshot's.
	var kept []worldSnapshot
	free := map[string]bool{}
	for _, slot := range snapshotSlots(clientID) {
		free[slot] = true
	}
	for _, sn := range snaps {
		if sn.log == logCreated(info) {
			kept = append(kept, sn)
			free[sn.slot] = false
		}
	}
	slot := ""
	for _, name := range snapshotSlots(clientID) {
		if free[name] {
			slot = name
			break
		}
	}
	if slot == "" {
		if kept[len(kept)-1].seq >= seq {
			// Another node stored as recent a snapshot meanwhile.
			return rp.trimLog(ctx, clientID, s, kept)
		}
		slot, kept = kept[0].slot, kept[1:]
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	paced, err := rp.pace(ctx, f)
	if err != nil {
		return err
	}
	stored, err := obs.Put(ctx, jetstream.ObjectMeta{
		Name:        slot,
		Description: fmt.Sprintf("relay: world %s as of record %d of its log", clientID, seq),
		Metadata: map[string]string{
			snapMetaClientID: clientID,
			snapMetaSeq:      strconv.FormatUint(seq, 10),
			snapMetaLog:      strconv.FormatInt(logCreated(info), 10),
			snapMetaNode:     rp.node.Name(),
		},
		Opts: &jetstream.ObjectMetaOptions{ChunkSize: snapshotChunk},
	}, paced)
	if err != nil {
		return fmt.Errorf("store the snapshot: %w", err)
	}
	rp.log.Info("stored a snapshot of a replicated world", "clientId", clientID, "seq", seq, "bytes", stored.Size, "took", time.Since(began).Round(time.Millisecond))
	kept = append(kept, worldSnapshot{slot: slot, seq: seq, log: logCreated(info), size: stored.Size})
	return rp.trimLog(ctx, clientID, s, kept)
}

// snapshotChunk is the size of a snapshot's chunks in the object store,
// and snapshotWindow how many of them an upload may have sent that the
// bucket has not stored yet.
const (
	snapshotChunk  = 128 << 10
	snapshotWindow = 64
)

// pacedReader feeds an upload to the object store at the pace the
// bucket stores it. The object store client publishes chunks without
// waiting for their acknowledgements (up to thousands at once), which
// for a large world would hold much of the database in the NATS
// connection and the servers' queues; this reader lets at most
// snapshotWindow chunks run ahead of the bucket's last stored message.
type pacedReader struct {
	ctx    context.Context
	r      io.Reader
	bucket jetstream.Stream
	// base is the bucket's last sequence before the upload; sent is how
	// many chunks the reader has handed over since, and stored how many
	// messages the bucket was last seen to have stored since.
	base, sent, stored uint64
}

// pace wraps r, the file of a snapshot about to be stored.
func (rp *Replication) pace(ctx context.Context, r io.Reader) (io.Reader, error) {
	s, err := rp.node.js.Stream(ctx, "OBJ_"+snapshotBucket)
	if err != nil {
		return nil, err
	}
	return &pacedReader{ctx: ctx, r: r, bucket: s, base: s.CachedInfo().State.LastSeq}, nil
}

func (p *pacedReader) Read(b []byte) (int, error) {
	for p.sent >= p.stored+snapshotWindow {
		info, err := p.bucket.Info(p.ctx)
		if err != nil {
			return 0, err
		}
		if last := info.State.LastSeq; last > p.base {
			p.stored = last - p.base
		}
		if p.sent < p.stored+snapshotWindow {
			break
		}
		select {
		case <-p.ctx.Done():
			return 0, p.ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	n, err := p.r.Read(b)
	if n > 0 {
		p.sent++
	}
	return n, err
}

// trimLog purges the world's log below the oldest of the kept snapshots,
// leaving at least the log's last record: the host appends against it,
// and a log that holds nothing would read as a world never replicated.
func (rp *Replication) trimLog(ctx context.Context, clientID string, s jetstream.Stream, kept []worldSnapshot) error {
	if len(kept) == 0 {
		return nil
	}
	oldest := kept[0].seq
	for _, sn := range kept {
		oldest = min(oldest, sn.seq)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return err
	}
	keepFrom := min(oldest+1, info.State.LastSeq)
	if keepFrom <= info.State.FirstSeq {
		return nil
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSequence(keepFrom)); err != nil {
		return fmt.Errorf("trim the log: %w", err)
	}
	rp.log.Info("trimmed a replicated world's log", "clientId", clientID, "firstSeq", keepFrom, "lastSeq", info.State.LastSeq)
	return nil
}

// snapshotPath is where a follower writes a world's snapshot before it
// stores it: beside the copies, not in the copy's directory, which moves
// when the node takes the world over.
func (rp *Replication) snapshotPath(clientID, what string) string {
	return filepath.Join(rp.opts.DataDir, "replicas", "."+what+"-"+clientID+".db")
}

// afterApply counts an applied record of size bytes and snapshots the
// copy if one is due.
func (f *follower) afterApply(size int) {
	f.snap.sinceBytes.Add(int64(size))
	f.snapshotIfDue()
}

// snapshotIfDue, on the world's snapshot taker, snapshots the copy once
// enough records or bytes were applied since the newest snapshot. The
// copy is written to a file here, between two records, and stored in the
// background. The follower calls it after each record it applies, and
// also while the log is quiet: records applied while an earlier snapshot
// was being stored, or after a snapshot failed, would otherwise wait for
// the world's next write, and a world that fell quiet would keep its log
// untrimmed.
func (f *follower) snapshotIfDue() {
	st := &f.snap
	if !st.taker.Load() || st.busy.Load() || !f.rep.Complete() || time.Now().UnixNano() < st.retryAt.Load() {
		return
	}
	cfg := f.rp.node.cfg
	seq := f.rep.Seq()
	bytes := st.sinceBytes.Load()
	if seq < st.lastSeq.Load()+uint64(cfg.SnapshotRecords) && bytes < cfg.SnapshotBytes {
		return
	}
	path := f.rp.snapshotPath(f.id, "snapshot")
	if err := f.rep.Snapshot(f.ctx, path); err != nil {
		if f.ctx.Err() == nil {
			f.rp.log.Warn("could not snapshot a replicated world", "clientId", f.id, "seq", seq, "error", err)
			st.retryAt.Store(time.Now().Add(snapshotRetry).UnixNano())
		}
		return
	}
	st.busy.Store(true)
	st.bg.Go(func() {
		defer st.busy.Store(false)
		defer os.Remove(path)
		ctx, cancel := context.WithTimeout(f.ctx, snapshotTimeout)
		defer cancel()
		for f.rp.holdSnapshots.Load() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := f.rp.storeSnapshot(ctx, f.id, seq, path); err != nil {
			if f.ctx.Err() == nil {
				f.rp.log.Warn("could not store a snapshot of a replicated world", "clientId", f.id, "seq", seq, "error", err)
				st.retryAt.Store(time.Now().Add(snapshotRetry).UnixNano())
			}
			return
		}
		st.sinceBytes.Add(-bytes)
		if seq > st.lastSeq.Load() {
			st.lastSeq.Store(seq)
		}
	})
}

// catchUp runs before the follower consumes the log described by info: it
// learns the world's newest snapshot and, when the copy lacks records the
// log no longer holds or holds no whole world, restores that snapshot.
func (f *follower) catchUp(info *jetstream.StreamInfo) error {
	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	obs, err := f.rp.snapshotStore(ctx)
	var snaps []worldSnapshot
	if err == nil {
		snaps, err = f.rp.worldSnapshots(ctx, obs, f.id)
	}
	cancel()
	trimmed := info.State.FirstSeq > f.rep.Seq()+1
	if err != nil {
		if trimmed {
			return fmt.Errorf("the log was trimmed past the copy, and its snapshots cannot be read: %w", err)
		}
		return nil
	}
	var newest *worldSnapshot
	for i := range snaps {
		if snaps[i].usable(info) {
			newest = &snaps[i]
		}
	}
	if newest == nil {
		if trimmed {
			return fmt.Errorf("the log was trimmed past the copy (it holds record %d, the log starts at %d) and no snapshot holds the records between", f.rep.Seq(), info.State.FirstSeq)
		}
		return nil
	}
	if newest.seq > f.snap.lastSeq.Load() {
		f.snap.lastSeq.Store(newest.seq)
	}
	if !trimmed && (f.rep.Complete() || newest.seq <= f.rep.Seq()) {
		return nil
	}
	if wait := time.Until(f.snap.restoreAt); wait > 0 {
		return fmt.Errorf("the copy needs a snapshot: trying again in %v", wait.Round(time.Millisecond))
	}
	if err := f.restore(obs, newest.slot, info); err != nil {
		if f.ctx.Err() != nil {
			return err
		}
		f.snap.restoreAt = time.Now().Add(snapshotRetry / 2)
		f.rp.log.Warn("could not restore a replicated world's copy from a snapshot; trying again shortly", "clientId", f.id, "error", err)
		return err
	}
	return nil
}

// restore replaces the copy with the snapshot in slot, downloaded chunk
// by chunk into a file.
func (f *follower) restore(obs jetstream.ObjectStore, slot string, info *jetstream.StreamInfo) error {
	began := time.Now()
	ctx, cancel := context.WithTimeout(f.ctx, snapshotTimeout)
	defer cancel()
	res, err := obs.Get(ctx, slot)
	if err != nil {
		return fmt.Errorf("read snapshot %s: %w", slot, err)
	}
	defer res.Close()
	oi, err := res.Info()
	if err != nil {
		return err
	}
	// The slot may have been written again since it was looked at: the
	// object read is the one to check.
	sn, ok := parseSnapshot(oi)
	if !ok || oi.Metadata[snapMetaClientID] != f.id || !sn.usable(info) {
		return fmt.Errorf("snapshot %s changed while it was read: try again", slot)
	}
	path := f.rp.snapshotPath(f.id, "restore")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	_, err = io.Copy(out, res)
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("download snapshot %s: %w", slot, err)
	}
	from := f.rep.Seq()
	if err := f.rep.Restore(path, sn.seq); err != nil {
		return fmt.Errorf("restore snapshot %s: %w", slot, err)
	}
	f.rp.restores.Add(1)
	f.snap.sinceBytes.Store(0)
	f.rp.log.Info("restored a replicated world's copy from a snapshot", "clientId", f.id, "from", from, "seq", sn.seq, "bytes", sn.size, "took", time.Since(began).Round(time.Millisecond))
	return nil
}
