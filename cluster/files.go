package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tabletop-relay/relay/cluster/internal/steady"
	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/files"
)

// Replicated file areas.
//
// The bytes of each file of a replicated embedded world are kept in a
// JetStream object store of the world's own, RELAY_FILES_<clientId>, in
// as many copies as the world's stream; the world's log records which
// object each path holds (world.RecordFile). The host stores a file's
// object, then records it, then places the file in its area, all before
// the upload is acknowledged: the record is appended with the log's
// expected last sequence, so a host that lost the world can store an
// object but never record it (the object is deleted again at once, or, if
// the host dies first, by the next host's sweep). The object a path held
// before is deleted once the record that replaces it is in the log: a
// follower that finds an object gone skips it, since a later record sets
// the path again.
//
// Followers fetch each recorded object when they apply its record,
// streamed into their copy's file area (<data>/replicas/<clientId>/files),
// before the record counts as applied; the copy moves with its file area
// when a follower takes the world over. A new host makes sure that the
// manifest and its area agree (recording files the log does not know, such
// as those of a world that was not replicated before, and fetching those
// it lacks) and deletes the objects no record names.

// fileBucketPrefix starts the names of the worlds' object stores.
const fileBucketPrefix = "RELAY_FILES_"

// fileBucket is the name of a world's object store.
func fileBucket(clientID string) string { return fileBucketPrefix + clientID }

// fileTimeout bounds the storing or fetching of one file, whose size the
// upload limits bound.
const fileTimeout = 2 * time.Minute

// fileObjects returns the world's object store, made when create is set.
func (rp *Replication) fileObjects(ctx context.Context, clientID string, create bool) (jetstream.ObjectStore, error) {
	if obs, ok := rp.fileStores.Load(clientID); ok {
		return obs.(jetstream.ObjectStore), nil
	}
	var obs jetstream.ObjectStore
	var err error
	if create {
		obs, err = rp.node.js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      fileBucket(clientID),
			Description: "relay: the files of embedded world " + clientID,
			Replicas:    rp.node.Replicas(),
			Storage:     jetstream.FileStorage,
		})
	} else {
		obs, err = rp.node.js.ObjectStore(ctx, fileBucket(clientID))
	}
	if err != nil {
		return nil, err
	}
	rp.fileStores.Store(clientID, obs)
	return obs, nil
}

// PutFile implements world.FileStore: it stores an object of a world this
// node holds.
func (rp *Replication) PutFile(ctx context.Context, clientID, object string, size int64, r io.Reader) error {
	reg := rp.reg.Load()
	if reg == nil || !reg.holds(clientID) {
		return errLeaseLost
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	// Making the store may time out while JetStream elects a leader or
	// is busy: it is tried again for as long as an append would be.
	obs, err := rp.fileObjects(ctx, clientID, true)
	for tries := time.Now(); err != nil; obs, err = rp.fileObjects(ctx, clientID, true) {
		if time.Since(tries) > appendTimeout || !reg.holds(clientID) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	// A store made a moment ago may not have elected the leader of its
	// stream yet, and one whose leader moved answers no one for a while:
	// such a put stored nothing that counts (the object is written again
	// under the same name), and is tried again from the file's start
	// while the lease holds.
	rewind, rewinds := r.(io.Seeker)
	var info *jetstream.ObjectInfo
	for tries := time.Now(); ; {
		info, err = obs.Put(ctx, jetstream.ObjectMeta{Name: object}, r)
		if err == nil {
			break
		}
		if !rewinds || !steady.Transient(err) || time.Since(tries) > appendTimeout || !reg.holds(clientID) {
			// The store may be gone (its world was removed and made
			// again): the next file looks it up afresh.
			rp.fileStores.Delete(clientID)
			return err
		}
		if _, serr := rewind.Seek(0, io.SeekStart); serr != nil {
			return errors.Join(err, serr)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	if int64(info.Size) != size {
		_ = rp.DeleteFile(context.WithoutCancel(ctx), clientID, object)
		return fmt.Errorf("stored %d bytes of a file of %d", info.Size, size)
	}
	return nil
}

// DeleteFile implements world.FileStore. Deleting an object leaves a
// marker in the store; the marker is purged too, so that the store holds
// nothing of the objects it no longer needs.
func (rp *Replication) DeleteFile(ctx context.Context, clientID, object string) error {
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	obs, err := rp.fileObjects(ctx, clientID, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := obs.Delete(ctx, object); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return err
	}
	s, err := rp.node.js.Stream(ctx, "OBJ_"+fileBucket(clientID))
	if err != nil {
		return err
	}
	name := base64.URLEncoding.EncodeToString([]byte(object))
	return s.Purge(ctx, jetstream.WithPurgeSubject("$O."+fileBucket(clientID)+".M."+name))
}

// ForgetFiles deletes the object store of a world that was removed.
func (rp *Replication) ForgetFiles(ctx context.Context, clientID string) error {
	rp.fileStores.Delete(clientID)
	ctx, cancel := context.WithTimeout(ctx, appendTimeout)
	defer cancel()
	err := rp.node.js.DeleteObjectStore(ctx, fileBucket(clientID))
	if errors.Is(err, jetstream.ErrBucketNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	return err
}

// hostArea is the file area of a world this node serves.
func (rp *Replication) hostArea(clientID string) *files.Area {
	return files.New(filepath.Join(filepath.Dir(rp.opts.Worlds.WorldPath(clientID)), "files"))
}

// SyncFiles brings the replicated file area of a world this node serves
// in line with its log: files of the area the manifest lacks are
// recorded, files of the manifest the area lacks (or holds at another
// size) are fetched, and the objects no record names are deleted. It runs
// when the node starts serving a world, and after files were written into
// the area by other means than an upload (a new world's demo files).
func (rp *Replication) SyncFiles(ctx context.Context, clientID string) error {
	if r := rp.reg.Load(); r == nil || !r.holds(clientID) {
		return nil
	}
	eng, err := rp.opts.Worlds.World(ctx, clientID)
	if err != nil {
		return err
	}
	if !eng.ReplicatesFiles() {
		return nil
	}
	area := rp.hostArea(clientID)
	return area.Locked(func() error {
		manifest := map[string]world.FileRecord{}
		if err := eng.RecordedFiles(ctx, func(r world.FileRecord) error {
			manifest[r.Path] = r
			return nil
		}); err != nil {
			return err
		}
		onDisk := map[string]int64{}
		if err := area.Walk(func(p string, size int64) error {
			onDisk[p] = size
			return nil
		}); err != nil {
			return err
		}
		for p, size := range onDisk {
			if _, ok := manifest[p]; ok {
				continue
			}
			digest, err := fileDigest(filepath.Join(area.Dir(), filepath.FromSlash(p)))
			if err != nil {
				return err
			}
			open := func() (io.ReadCloser, error) { return os.Open(filepath.Join(area.Dir(), filepath.FromSlash(p))) }
			if err := eng.RecordFile(ctx, p, digest, size, open); err != nil {
				return err
			}
		}
		for p, rec := range manifest {
			if size, ok := onDisk[p]; ok && size == rec.Size {
				continue
			}
			// Recorded but not placed here (the node died in between):
			// the log is right, the area follows it.
			if err := rp.fetchFile(ctx, clientID, area, rec); err != nil {
				return err
			}
		}
		return rp.sweepObjects(ctx, clientID, eng)
	})
}

// syncFiles runs SyncFiles for a world this node just started serving,
// with a time limit of its own, trying again after a failure (JetStream
// busy or electing a leader) until the limit, or the world is no longer
// this node's.
func (rp *Replication) syncFiles(clientID string) {
	ctx, cancel := context.WithTimeout(context.Background(), fileTimeout)
	defer cancel()
	for {
		err := rp.SyncFiles(ctx, clientID)
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			rp.log.Warn("could not bring a world's replicated files in line with its log", "clientId", clientID, "error", err)
			return
		case <-rp.stop:
			return
		case <-time.After(time.Second):
		}
	}
}

// sweepObjects deletes the objects of a world's store that no entry of its
// manifest names: those of a host that lost the world between storing and
// recording a file, or that died before deleting a replaced one. It runs
// under the area's lock, while no upload is between the two steps.
func (rp *Replication) sweepObjects(ctx context.Context, clientID string, eng *world.Engine) error {
	obs, err := rp.fileObjects(ctx, clientID, false)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	named := map[string]bool{}
	if err := eng.RecordedFiles(ctx, func(r world.FileRecord) error {
		named[r.Object] = true
		return nil
	}); err != nil {
		return err
	}
	list, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, info := range list {
		if !named[info.Name] {
			if err := rp.DeleteFile(ctx, clientID, info.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileDigest is the digest of a file as the manifest writes it.
func fileDigest(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// errFileSuperseded reports an object that is gone from the store.
var errFileSuperseded = errors.New("the object is gone: a later record replaced it")

// fetchFile writes the object a record names into an area, streamed, and
// checks its digest before the file takes its place. An object that is
// gone is skipped (a later record replaced it). It takes no lock: a
// follower's area is its own, and a host's sync holds the area's lock.
func (rp *Replication) fetchFile(ctx context.Context, clientID string, area *files.Area, rec world.FileRecord) error {
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	obs, err := rp.fileObjects(ctx, clientID, false)
	if err == nil {
		var res jetstream.ObjectResult
		res, err = obs.Get(ctx, rec.Object)
		if err == nil {
			defer res.Close()
			o := files.WriteOptions{Overwrite: true, MaxBytes: rec.Size, Verify: func(p files.Pending) error {
				if p.Digest != rec.Digest || p.Size != rec.Size {
					return fmt.Errorf("the object of %s has digest %s and %d bytes, its record %s and %d", rec.Path, p.Digest, p.Size, rec.Digest, rec.Size)
				}
				return nil
			}}
			_, err = area.Write(ctx, path.Dir(rec.Path), path.Base(rec.Path), res, o)
		}
	}
	if errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) {
		rp.log.Debug("skipped a file whose object is gone", "clientId", clientID, "path", rec.Path, "error", errFileSuperseded)
		return nil
	}
	if err != nil {
		return fmt.Errorf("fetch %s: %w", rec.Path, err)
	}
	return nil
}

// applyFiles applies the file operations of a log record to a follower's
// copy, before the record itself.
func (f *follower) applyFiles(record []byte) error {
	changes, restart, err := world.FileChanges(record)
	if err != nil || (len(changes) == 0 && !restart) {
		return err
	}
	area := files.New(filepath.Join(f.rp.copyDir(f.id), "files"))
	if restart {
		if err := area.RemoveAll(); err != nil {
			return err
		}
	}
	for _, c := range changes {
		if c.Object == "" {
			if err := area.Remove(c.Path); err != nil {
				return err
			}
			continue
		}
		if err := f.rp.fetchFile(f.ctx, f.id, area, c); err != nil {
			return err
		}
	}
	return nil
}
