package files

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tabletop-relay/relay/internal/clientid"
	"github.com/tabletop-relay/relay/world"
)

// RemoveTemporary removes the temporary files of writes that never
// finished (the process was killed between creating the temporary file and
// moving it into place, or before removing it after a hard link) anywhere
// in the area, and returns how many it removed. Listings hide such files,
// but without this they would take disk space for ever.
//
// It must run only while no write is in progress on the area, such as when
// the relay starts: it cannot tell an abandoned temporary file from one
// being written. Symbolic links are not followed; a missing area is not an
// error.
func (a *Area) RemoveTemporary() (int, error) {
	removed := 0
	err := filepath.WalkDir(a.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		removed++
		return nil
	})
	return removed, err
}

// RemoveTemporaryAll runs [Area.RemoveTemporary] on the file area of every
// world of the data directory, returning how many files it removed in all.
// The same rule applies: no write may be in progress.
func RemoveTemporaryAll(dataDir string) (int, error) {
	entries, err := os.ReadDir(filepath.Join(dataDir, "worlds"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	total := 0
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !clientid.Valid(e.Name()) {
			continue
		}
		area, err := Of(dataDir, e.Name())
		if err != nil {
			continue
		}
		n, err := area.RemoveTemporary()
		total += n
		errs = append(errs, err)
	}
	return total, errors.Join(errs...)
}

// Walk calls fn with the path (relative to the area's root) and size of
// every regular file of the area, leaving out the temporary files of
// writes; symbolic links are not followed. A missing area has no files.
func (a *Area) Walk(fn func(p string, size int64) error) error {
	err := filepath.WalkDir(a.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(a.dir, p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel), info.Size())
	})
	return err
}

// Remove removes the file at p, if there is one, with the directories
// above it that it leaves empty.
func (a *Area) Remove(p string) error {
	clean, err := Clean(p)
	if err != nil {
		return err
	}
	if clean == "" {
		return world.Errorf(world.ErrInvalid, "'path' must name a file")
	}
	root, err := a.open()
	if err != nil {
		return err
	}
	defer root.Close()
	if err := root.Remove(clean); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fsError(err, clean)
	}
	for dir := path.Dir(clean); dir != "."; dir = path.Dir(dir) {
		if root.Remove(dir) != nil {
			break
		}
	}
	return nil
}

// RemoveAll removes every file and directory of the area.
func (a *Area) RemoveAll() error { return os.RemoveAll(a.dir) }
