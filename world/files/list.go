package files

import (
	"context"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/tabletop-relay/relay/world"
)

// Listing limits.
const (
	// DefaultDepth is how many levels a recursive listing descends by default.
	DefaultDepth = 3
	// MaxDepth bounds the depth a caller may ask for.
	MaxDepth = 10
	// MaxEntries bounds one listing.
	MaxEntries = 10000
)

// List lists the directory at p: its directories, then its files, then,
// when recursive, the entries of each sub-directory (in the same order) down
// to depth levels (DefaultDepth when 0, at most MaxDepth; 1 is the directory
// alone). It returns the cleaned path. Symbolic links are listed as what
// they point to when that is inside the area, left out otherwise, and never
// descended into.
func (a *Area) List(ctx context.Context, p string, recursive bool, depth int) (string, []Entry, error) {
	clean, err := Clean(p)
	if err != nil {
		return "", nil, err
	}
	if depth <= 0 {
		depth = DefaultDepth
	}
	if depth > MaxDepth {
		return "", nil, world.Errorf(world.ErrInvalid, "'depth' must be at most %d", MaxDepth)
	}
	if !recursive {
		depth = 1
	}
	root, err := a.open()
	if err != nil {
		return "", nil, err
	}
	defer root.Close()
	info, err := root.Stat(rootName(clean))
	if err != nil {
		return "", nil, fsError(err, clean)
	}
	if !info.IsDir() {
		return "", nil, world.Errorf(world.ErrInvalid, "Not a directory: %s", clean)
	}
	out := []Entry{}
	if err := listDir(ctx, root, clean, depth, &out); err != nil {
		return "", nil, err
	}
	return clean, out, nil
}

// listDir appends the entries of one directory and, depth allowing, of its
// sub-directories.
func listDir(ctx context.Context, root *os.Root, dir string, depth int, out *[]Entry) error {
	if err := ctx.Err(); err != nil {
		return world.Errorf(world.ErrUnavailable, "The listing was canceled")
	}
	f, err := root.Open(rootName(dir))
	if err != nil {
		return fsError(err, dir)
	}
	raw, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fsError(err, dir)
	}
	var dirs, files []Entry
	var descend []string
	for _, d := range raw {
		name := d.Name()
		if strings.HasPrefix(name, tempPrefix) {
			continue
		}
		rel := path.Join(dir, name)
		info, err := d.Info()
		if err != nil {
			continue // removed meanwhile
		}
		link := info.Mode()&fs.ModeSymlink != 0
		if link {
			if info, err = root.Stat(rel); err != nil {
				continue // dangling, or pointing outside the area
			}
		}
		e := Entry{Name: name, Path: rel, Modified: info.ModTime().UTC()}
		switch {
		case info.IsDir():
			e.Type = TypeDirectory
			dirs = append(dirs, e)
			if !link {
				descend = append(descend, rel)
			}
		case info.Mode().IsRegular():
			e.Type, e.Size = TypeFile, info.Size()
			files = append(files, e)
		}
	}
	byName := func(a, b Entry) int { return strings.Compare(a.Name, b.Name) }
	slices.SortFunc(dirs, byName)
	slices.SortFunc(files, byName)
	slices.Sort(descend)
	if len(*out)+len(dirs)+len(files) > MaxEntries {
		return world.Errorf(world.ErrTooLarge, "The listing has more than %d entries: list a sub-directory or lower 'depth'", MaxEntries)
	}
	*out = append(append(*out, dirs...), files...)
	if depth <= 1 {
		return nil
	}
	for _, sub := range descend {
		if err := listDir(ctx, root, sub, depth-1, out); err != nil {
			return err
		}
	}
	return nil
}
