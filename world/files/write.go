package files

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"path"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// WriteOptions tune a write.
type WriteOptions struct {
	// Overwrite replaces an existing file; without it an existing file is
	// ErrConflict.
	Overwrite bool
	// MaxBytes bounds the file's size; over it the write is ErrTooLarge and
	// leaves nothing. Zero or less means no limit.
	MaxBytes int64
	// Record, when set, is called once the bytes are on disk and before the
	// file takes its place (a replicated world records the file there);
	// an error from it fails the write, which then leaves nothing. Writes
	// of one area that have a Record run it and take their place one at a
	// time, so that the order of the records is the order of the files.
	Record func(ctx context.Context, p Pending) error
	// Verify, when set, is called once the bytes are on disk and before the
	// file takes its place, without the area's lock; an error from it
	// fails the write, which then leaves nothing. It checks what arrived
	// (the digest of a fetched copy, say).
	Verify func(p Pending) error
}

// Pending is a written file about to take its place, as [WriteOptions.Record]
// sees it.
type Pending struct {
	Path   string // relative to the area's root
	Size   int64
	Digest string // "sha256:" and the hex SHA-256 of the bytes
	// Open opens the written bytes for reading (the caller closes them).
	Open func() (io.ReadCloser, error)
}

// Written reports a finished write.
type Written struct {
	Path string // relative to the area's root
	Size int64
}

// Write stores the bytes read from r as the file name in directory dir
// (created with its missing parents), atomically: readers see the old file
// or the new one, never half of one. r is read to its end (io.EOF) or
// until the size limit is passed. On any failure (a bad path, an existing
// file without Overwrite, the limit, an error from r, ctx ending) nothing
// is left behind: neither the temporary file nor the directories the write
// created. An error from r is returned as is.
func (a *Area) Write(ctx context.Context, dir, name string, r io.Reader, o WriteOptions) (Written, error) {
	cleanDir, err := Clean(dir)
	if err != nil {
		return Written{}, err
	}
	cleanName, err := cleanName(name)
	if err != nil {
		return Written{}, err
	}
	target := path.Join(cleanDir, cleanName)
	if len(target) > MaxPathBytes {
		return Written{}, world.Errorf(world.ErrInvalid, "Path too long: at most %d bytes", MaxPathBytes)
	}
	root, err := a.open()
	if err != nil {
		return Written{}, err
	}
	defer root.Close()
	if err := checkTarget(root, target, o.Overwrite); err != nil {
		return Written{}, err
	}
	created, err := makeDirs(root, cleanDir)
	if err != nil {
		return Written{}, err
	}
	w := &write{root: root, target: target, tmp: path.Join(cleanDir, tempName())}
	if o.Record != nil {
		// The record and the placing happen under the area's lock; the
		// bytes arrive before it is taken.
		w.lock = lockOf(a.dir)
	}
	n, err := w.run(ctx, r, o)
	if err != nil {
		_ = root.Remove(w.tmp)
		removeEmpty(root, created)
		return Written{}, err
	}
	// The directories this write created are entries of their parents:
	// flush those too, deepest first, or a crash could lose the new file
	// with the directory that holds it.
	for i := len(created) - 1; i >= 0; i-- {
		syncDir(root, path.Dir(created[i]))
	}
	return Written{Path: target, Size: n}, nil
}

// checkTarget fails early when the target exists and may not be replaced.
func checkTarget(root *os.Root, target string, overwrite bool) error {
	info, err := root.Stat(target)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil && escapes(err):
		return fsError(err, target)
	case err != nil:
		// A parent that is a file, for example: let the write report it.
		return nil
	case info.IsDir():
		return world.Errorf(world.ErrConflict, "A directory already exists at %s", target)
	case !overwrite:
		return errExists(target)
	}
	return nil
}

// errExists is the error for an existing file without overwrite.
func errExists(target string) error {
	return world.Errorf(world.ErrConflict, "File already exists: %s. Set overwrite to true to replace it.", target)
}

// makeDirs creates dir and its missing parents, returning those it
// created, deepest last.
func makeDirs(root *os.Root, dir string) ([]string, error) {
	var created []string
	cur := ""
	for _, seg := range splitPath(dir) {
		cur = path.Join(cur, seg)
		err := root.Mkdir(cur, 0o755)
		switch {
		case err == nil:
			created = append(created, cur)
		case errors.Is(err, fs.ErrExist):
			info, serr := root.Stat(cur)
			if serr != nil {
				removeEmpty(root, created)
				return nil, fsError(serr, cur)
			}
			if !info.IsDir() {
				removeEmpty(root, created)
				return nil, world.Errorf(world.ErrConflict, "A file already exists at %s", cur)
			}
		default:
			removeEmpty(root, created)
			return nil, fsError(err, cur)
		}
	}
	return created, nil
}

// removeEmpty removes directories a failed write created, deepest first,
// as long as they are empty (another write may have used them meanwhile).
func removeEmpty(root *os.Root, created []string) {
	for i := len(created) - 1; i >= 0; i-- {
		if root.Remove(created[i]) != nil {
			return
		}
	}
}

// splitPath splits a cleaned path into its segments.
func splitPath(p string) []string {
	if p == "" {
		return nil
	}
	var out []string
	for {
		dir, file := path.Split(p)
		out = append([]string{file}, out...)
		if dir == "" {
			return out
		}
		p = path.Clean(dir)
	}
}

// tempName is a fresh name for a write's temporary file.
func tempName() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return tempPrefix + hex.EncodeToString(b[:])
}

// write is one write in progress.
type write struct {
	root   *os.Root
	target string
	tmp    string
	lock   *sync.Mutex // held while recording and placing, when set
}

// run copies r into the temporary file, flushes it to disk and moves it
// into place, returning the size.
func (w *write) run(ctx context.Context, r io.Reader, o WriteOptions) (int64, error) {
	f, err := w.root.OpenFile(w.tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return 0, fsError(err, w.target)
	}
	// Only a recorded or verified write needs the digest.
	var dst io.Writer = f
	var sum hash.Hash
	if o.Record != nil || o.Verify != nil {
		sum = sha256.New()
		dst = io.MultiWriter(f, sum)
	}
	n, err := copyLimited(ctx, dst, r, o.MaxBytes)
	if err == nil {
		if err = f.Sync(); err != nil {
			err = fsError(err, w.target)
		}
	}
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fsError(cerr, w.target)
	}
	if err != nil {
		return 0, err
	}
	if sum == nil {
		return n, w.finish(o.Overwrite)
	}
	p := Pending{Path: w.target, Size: n, Digest: "sha256:" + hex.EncodeToString(sum.Sum(nil)), Open: func() (io.ReadCloser, error) {
		return w.root.Open(w.tmp)
	}}
	if o.Verify != nil {
		if err := o.Verify(p); err != nil {
			return 0, err
		}
	}
	if w.lock != nil {
		w.lock.Lock()
		defer w.lock.Unlock()
		// Another write may have taken the name while the bytes arrived.
		if err := checkTarget(w.root, w.target, o.Overwrite); err != nil {
			return 0, err
		}
		if err := o.Record(ctx, p); err != nil {
			return 0, err
		}
	}
	return n, w.finish(o.Overwrite)
}

// finish moves the written file into place and flushes its directory.
func (w *write) finish(overwrite bool) error {
	if err := w.place(overwrite); err != nil {
		return err
	}
	syncDir(w.root, path.Dir(w.target))
	return nil
}

// areaLocks serialise the recorded writes of each area (see
// WriteOptions.Record). A fixed set, shared by the areas whose directory
// names hash alike, keeps them bounded however many worlds there are.
var areaLocks [64]sync.Mutex

// Locked runs fn under the lock that recorded writes of the area take, so
// that no recorded write is under way while fn runs.
func (a *Area) Locked(fn func() error) error {
	l := lockOf(a.dir)
	l.Lock()
	defer l.Unlock()
	return fn()
}

// lockOf is the lock of the area kept in dir.
func lockOf(dir string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(dir))
	return &areaLocks[h.Sum32()%uint32(len(areaLocks))]
}

// place moves the finished temporary file to the target. Without
// overwrite a hard link claims the name atomically (failing if it was
// taken since the early check); where links are not supported, a last
// check and a rename do.
func (w *write) place(overwrite bool) error {
	if overwrite {
		if err := w.root.Rename(w.tmp, w.target); err != nil {
			return fsError(err, w.target)
		}
		return nil
	}
	err := w.root.Link(w.tmp, w.target)
	switch {
	case err == nil:
		_ = w.root.Remove(w.tmp)
		return nil
	case errors.Is(err, fs.ErrExist):
		return errExists(w.target)
	}
	if _, serr := w.root.Lstat(w.target); serr == nil {
		return errExists(w.target)
	}
	if err := w.root.Rename(w.tmp, w.target); err != nil {
		return fsError(err, w.target)
	}
	return nil
}

// copyLimited copies r to f, failing with ErrTooLarge as soon as more than
// max bytes arrived (max <= 0: no limit) and stopping when ctx ends.
func copyLimited(ctx context.Context, f io.Writer, r io.Reader, max int64) (int64, error) {
	buf := make([]byte, 256<<10)
	var n int64
	for {
		if err := ctx.Err(); err != nil {
			return n, world.Errorf(world.ErrUnavailable, "The upload was canceled")
		}
		k, rerr := r.Read(buf)
		if k > 0 {
			n += int64(k)
			if max > 0 && n > max {
				return n, world.Errorf(world.ErrTooLarge, "File too large: the upload limit is %d bytes", max)
			}
			if _, err := f.Write(buf[:k]); err != nil {
				return n, world.Wrapf(world.ErrUnavailable, err, "Could not write the file")
			}
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// syncDir flushes a directory's entries, so a finished write survives a
// crash; a failure here is not the caller's problem.
func syncDir(root *os.Root, dir string) {
	d, err := root.Open(dir) // path.Dir gives "." for the root
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}
