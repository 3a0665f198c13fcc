package world

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tabletop-relay/relay/internal/clientid"
)

// Host keeps the worlds of one relay: each world is a directory
// `<dataDir>/worlds/<clientId>/` holding its database `world.db`. Worlds are
// discovered from those directories and opened on first use; an open world
// stays open until it or the host is closed. A Host is safe for concurrent
// use.
type Host struct {
	dir  string // <dataDir>/worlds
	opts Options

	mu     sync.Mutex
	worlds map[string]*hostWorld // opened, opening or being created
	closed bool

	watchers atomic.Pointer[[]func(clientID string, changes []Change)]
	// ids caches the client ids of the worlds (see IDs); nil when they
	// must be read again.
	ids   atomic.Pointer[[]string]
	idsMu sync.Mutex
}

// hostWorld is a world the host opened, or is opening or creating. ready is
// closed once eng or err is set.
type hostWorld struct {
	ready chan struct{}
	eng   *Engine
	err   error
}

// dbFile is the name of a world's database in its directory.
const dbFile = "world.db"

// creatingPrefix starts the names of the directories where worlds are
// built before they are moved into place. Such a directory left behind by a
// crash is a world that never finished being created.
const creatingPrefix = ".creating-"

// OpenHost opens the worlds kept under dataDir, creating the directory when
// needed and removing worlds whose creation a crash interrupted. opts apply
// to every world the host opens.
func OpenHost(dataDir string, opts Options) (*Host, error) {
	if dataDir == "" {
		return nil, Errorf(ErrInvalid, "The data directory is required")
	}
	dir := filepath.Join(dataDir, "worlds")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, Errorf(ErrUnavailable, "Could not create the worlds directory: %v", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, Errorf(ErrUnavailable, "Could not read the worlds directory: %v", err)
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), creatingPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return nil, Errorf(ErrUnavailable, "Could not remove an unfinished world: %v", err)
			}
		}
	}
	return &Host{dir: dir, opts: opts, worlds: map[string]*hostWorld{}}, nil
}

// Watch adds a function called after every committed transaction of every
// world of the host, with the world's client id, after Options.OnCommit.
// Like OnCommit it is called once per transaction, in commit order, by the
// world's committer, and must not block.
func (h *Host) Watch(fn func(clientID string, changes []Change)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var list []func(string, []Change)
	if old := h.watchers.Load(); old != nil {
		list = slices.Clone(*old)
	}
	list = append(list, fn)
	h.watchers.Store(&list)
}

// World returns the engine of the world with the given client id, opening
// it on first use; concurrent callers share one opening, and every call
// returns the same engine while it stays open. An unknown world is
// ErrNotFound `Unknown world: <clientId>`.
func (h *Host) World(ctx context.Context, clientID string) (*Engine, error) {
	if !clientid.Valid(clientID) {
		return nil, errUnknownWorld(clientID)
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errHostClosed()
	}
	w, ok := h.worlds[clientID]
	if !ok {
		w = &hostWorld{ready: make(chan struct{})}
		h.worlds[clientID] = w
	}
	h.mu.Unlock()
	if !ok {
		h.finish(clientID, w, func() (*Engine, error) { return h.open(ctx, clientID, w) })
	}
	select {
	case <-w.ready:
	case <-ctx.Done():
		return nil, contextError(ctx.Err())
	}
	if w.err != nil {
		return nil, w.err
	}
	return w.eng, nil
}

// finish runs the opening (or creation) of a world and publishes its result
// to everyone waiting; a failed world is forgotten so a later call can try
// again.
func (h *Host) finish(clientID string, w *hostWorld, open func() (*Engine, error)) {
	w.eng, w.err = open()
	if w.err != nil {
		h.forget(clientID, w)
	}
	close(w.ready)
}

// forget drops a world from the host's list, if it is still that world.
func (h *Host) forget(clientID string, w *hostWorld) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.worlds[clientID] == w {
		delete(h.worlds, clientID)
	}
}

// open opens an existing world's database, for the host's entry w.
func (h *Host) open(ctx context.Context, clientID string, w *hostWorld) (*Engine, error) {
	path := filepath.Join(h.dir, clientID, dbFile)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, errUnknownWorld(clientID)
	}
	opts := h.opts
	opts.OnCommit = func(changes []Change) {
		if h.opts.OnCommit != nil {
			h.opts.OnCommit(changes)
		}
		if list := h.watchers.Load(); list != nil {
			for _, fn := range *list {
				fn(clientID, changes)
			}
		}
	}
	// The opening is shared by every caller waiting for it: one caller
	// giving up must not fail it for the others.
	e, err := openEngine(context.WithoutCancel(ctx), path, clientID, opts)
	if err != nil {
		return nil, Wrapf(ErrUnavailable, err, "World %s could not be opened", clientID)
	}
	e.onClose = func() { h.forget(clientID, w) }
	return e, nil
}

// Create creates a world from a seed and returns it, open. The client id
// must be 1 to 64 letters, digits, '_' or '-', starting with a letter or
// digit; an existing world is ErrConflict. The world is built in a
// directory of its own and moved into place only once its database holds
// the whole seed, so a failed or interrupted creation leaves no world
// behind.
func (h *Host) Create(ctx context.Context, clientID string, seed Seed) (*Engine, error) {
	if !clientid.Valid(clientID) {
		return nil, Errorf(ErrInvalid, "Invalid world id '%s': use 1 to 64 letters, digits, '_' or '-', starting with a letter or digit", clientID)
	}
	var w *hostWorld
	for w == nil {
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return nil, errHostClosed()
		}
		if other, ok := h.worlds[clientID]; ok {
			// Someone is opening (or creating) this id: its outcome
			// decides. A failed attempt is forgotten, so look again.
			h.mu.Unlock()
			select {
			case <-other.ready:
			case <-ctx.Done():
				return nil, contextError(ctx.Err())
			}
			if other.err == nil {
				return nil, Errorf(ErrConflict, "World already exists: %s", clientID)
			}
			continue
		}
		if _, err := os.Stat(filepath.Join(h.dir, clientID)); err == nil {
			h.mu.Unlock()
			return nil, Errorf(ErrConflict, "World already exists: %s", clientID)
		}
		w = &hostWorld{ready: make(chan struct{})}
		h.worlds[clientID] = w
		h.mu.Unlock()
	}
	h.finish(clientID, w, func() (*Engine, error) { return h.create(ctx, clientID, seed, w) })
	if w.err != nil {
		return nil, w.err
	}
	return w.eng, nil
}

// create builds a world's directory aside, moves it into place and opens
// the world, for the host's entry w.
func (h *Host) create(ctx context.Context, clientID string, seed Seed, w *hostWorld) (*Engine, error) {
	tmp, err := os.MkdirTemp(h.dir, creatingPrefix+clientID+"-")
	if err != nil {
		return nil, Wrapf(ErrUnavailable, err, "Could not create world %s", clientID)
	}
	done := false
	defer func() {
		if !done {
			os.RemoveAll(tmp)
		}
	}()
	if err := seedWorld(ctx, filepath.Join(tmp, dbFile), clientID, seed, h.opts); err != nil {
		return nil, err
	}
	final := filepath.Join(h.dir, clientID)
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, Errorf(ErrConflict, "World already exists: %s", clientID)
		}
		return nil, Wrapf(ErrUnavailable, err, "Could not create world %s", clientID)
	}
	done = true
	h.forgetIDs()
	// Make the rename itself durable before anyone relies on the world.
	if err := syncDir(h.dir); err != nil {
		return nil, Wrapf(ErrUnavailable, err, "Could not create world %s", clientID)
	}
	return h.open(ctx, clientID, w)
}

// syncDir flushes a directory's entries to disk.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// List describes every world of the host, sorted by client id. Worlds not
// open yet are described from their settings without being opened.
func (h *Host) List(ctx context.Context) ([]Info, error) {
	ids, err := h.scanIDs()
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(ids))
	for _, id := range ids {
		h.mu.Lock()
		w := h.worlds[id]
		h.mu.Unlock()
		if w != nil {
			select {
			case <-w.ready:
				if w.eng != nil {
					out = append(out, w.eng.Info())
					continue
				}
			default:
			}
		}
		out = append(out, readInfo(ctx, filepath.Join(h.dir, id, dbFile), id))
	}
	return out, nil
}

// readInfo reads a world's description from its settings. A world whose
// settings cannot be read is still listed, by its client id.
func readInfo(ctx context.Context, path, clientID string) Info {
	info := Info{ClientID: clientID}
	st, err := openStore(path, false)
	if err != nil {
		return info
	}
	defer st.close()
	if meta, err := st.loadMeta(ctx); err == nil {
		info.Title, info.System = meta[metaTitle], meta[metaSystem]
	}
	return info
}

// Close closes every open world; the host serves nothing afterwards.
func (h *Host) Close() error {
	h.mu.Lock()
	h.closed = true
	worlds := slices.Collect(maps.Values(h.worlds))
	h.mu.Unlock()
	var errs []error
	for _, w := range worlds {
		<-w.ready
		if w.eng != nil {
			errs = append(errs, w.eng.Close())
		}
	}
	return errors.Join(errs...)
}

func errUnknownWorld(clientID string) error {
	return Errorf(ErrNotFound, "Unknown world: %s", clientID)
}

func errHostClosed() error { return Errorf(ErrUnavailable, "The world host is closed") }

// Delete removes a world: its engine is closed (the calls under way on it
// finish first), and its directory, with its database and file area, is
// removed. While the world is being removed it answers as unknown; an
// unknown world is ErrNotFound. The directory is first renamed aside, so a
// crash in the middle leaves no half-removed world: OpenHost removes what
// remains.
func (h *Host) Delete(ctx context.Context, clientID string) error {
	if !clientid.Valid(clientID) {
		return errUnknownWorld(clientID)
	}
	gone := &hostWorld{ready: make(chan struct{})}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errHostClosed()
	}
	old := h.worlds[clientID]
	if old != nil {
		// Someone is opening or creating the world: wait for that to
		// settle, then look again.
		h.mu.Unlock()
		select {
		case <-old.ready:
		case <-ctx.Done():
			return contextError(ctx.Err())
		}
		h.mu.Lock()
		if h.closed {
			h.mu.Unlock()
			return errHostClosed()
		}
		if cur := h.worlds[clientID]; cur != nil && cur != old {
			h.mu.Unlock()
			return Errorf(ErrConflict, "World %s is changing; try again", clientID)
		}
	}
	// From here every caller of World and Create waits for the removal,
	// then finds no world.
	h.worlds[clientID] = gone
	h.mu.Unlock()
	err := h.remove(clientID, old)
	gone.err = errUnknownWorld(clientID)
	h.forget(clientID, gone)
	close(gone.ready)
	return err
}

// remove closes the world's engine, if open, and removes its directory.
func (h *Host) remove(clientID string, open *hostWorld) error {
	if open != nil && open.eng != nil {
		if err := open.eng.Close(); err != nil {
			return err
		}
	}
	dir := filepath.Join(h.dir, clientID)
	if _, err := os.Stat(filepath.Join(dir, dbFile)); errors.Is(err, fs.ErrNotExist) {
		return errUnknownWorld(clientID)
	}
	aside, err := os.MkdirTemp(h.dir, creatingPrefix+"removed-")
	if err != nil {
		return Wrapf(ErrUnavailable, err, "Could not remove world %s", clientID)
	}
	target := filepath.Join(aside, clientID)
	if err := os.Rename(dir, target); err != nil {
		os.Remove(aside)
		return Wrapf(ErrUnavailable, err, "Could not remove world %s", clientID)
	}
	h.forgetIDs()
	if err := syncDir(h.dir); err != nil {
		return Wrapf(ErrUnavailable, err, "Could not remove world %s", clientID)
	}
	if err := os.RemoveAll(aside); err != nil {
		return Wrapf(ErrUnavailable, err, "Could not remove world %s", clientID)
	}
	return nil
}

// DiskBytes is the size on disk of a world's directory: its database
// (with its write-ahead log) and its file area. An unknown world is 0.
func (h *Host) DiskBytes(clientID string) int64 {
	if !clientid.Valid(clientID) {
		return 0
	}
	var total int64
	_ = filepath.WalkDir(filepath.Join(h.dir, clientID), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}

// DatabaseBytes is the size on disk of a world's database with its
// write-ahead log: what the world's documents, settings and kept events
// take, without its file area. An unknown world is 0.
func (h *Host) DatabaseBytes(clientID string) int64 {
	if !clientid.Valid(clientID) {
		return 0
	}
	var total int64
	for _, name := range []string{dbFile, dbFile + "-wal"} {
		if info, err := os.Stat(filepath.Join(h.dir, clientID, name)); err == nil {
			total += info.Size()
		}
	}
	return total
}
