package files

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/tabletop-relay/relay/internal/clientid"
	"github.com/tabletop-relay/relay/world"
)

// Area is one world's file area. It holds only the directory's name; each
// operation opens the directory as an [os.Root] for as long as it runs. An
// Area is safe for concurrent use.
type Area struct {
	dir string
}

// Of returns the file area of a world: `<dataDir>/worlds/<clientID>/files`.
func Of(dataDir, clientID string) (*Area, error) {
	if dataDir == "" {
		return nil, world.Errorf(world.ErrUnavailable, "The file area is not configured")
	}
	if !clientid.Valid(clientID) {
		return nil, world.Errorf(world.ErrInvalid, "Invalid client id: %s", clientID)
	}
	return New(filepath.Join(dataDir, "worlds", clientID, "files")), nil
}

// New returns the file area kept in dir, created on first use.
func New(dir string) *Area { return &Area{dir: dir} }

// Dir is the area's directory.
func (a *Area) Dir() string { return a.dir }

// open opens the area's root, creating the directory when it is missing.
func (a *Area) open() (*os.Root, error) {
	root, err := os.OpenRoot(a.dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(a.dir, 0o755); err != nil {
			return nil, world.Errorf(world.ErrUnavailable, "Could not create the file area")
		}
		root, err = os.OpenRoot(a.dir)
	}
	if err != nil {
		return nil, world.Errorf(world.ErrUnavailable, "Could not open the file area")
	}
	return root, nil
}

// Entry is a file or directory of the area.
type Entry struct {
	Name     string // the last path segment
	Path     string // relative to the area's root
	Type     string // "file" or "directory"
	Size     int64  // 0 for directories
	Modified time.Time
}

// Entry types.
const (
	TypeFile      = "file"
	TypeDirectory = "directory"
)

// fsError turns an error of a file operation on path p into a world error:
// a missing file is ErrNotFound, an escape from the area (a symbolic link
// pointing out) ErrInvalid, anything else ErrUnavailable. The message
// names the path as the caller wrote it, relative to the area, and at most
// the operating system's short description of the failure ("not a
// directory"); for an ErrUnavailable the error itself, which names the
// area's absolute path, travels as the cause, for the server's log only.
func fsError(err error, p string) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return world.Errorf(world.ErrNotFound, "Path not found: %s", display(p))
	case escapes(err):
		return world.Errorf(world.ErrInvalid, "Path leads outside the file area: %s", display(p))
	case errors.Is(err, fs.ErrPermission):
		return world.Wrapf(world.ErrUnavailable, err, "Access denied by the file system: %s", display(p))
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno == syscall.ENOTDIR {
		// A path through a file: there is nothing at it.
		return world.Errorf(world.ErrNotFound, "Path not found: %s (a part of it is a file)", display(p))
	}
	if errors.As(err, &errno) {
		return world.Wrapf(world.ErrUnavailable, err, "File system error on %s: %s", display(p), errno.Error())
	}
	return world.Wrapf(world.ErrUnavailable, err, "File system error on %s", display(p))
}

// escapes reports whether an os.Root operation failed because the path
// (through a symbolic link) leads outside the root. os.Root does not
// export that error, so its text is the only way to tell.
func escapes(err error) bool {
	return err != nil && strings.Contains(err.Error(), "path escapes from parent")
}

// display names a cleaned path in messages; the root is "/".
func display(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// rootName is a cleaned path as os.Root names it.
func rootName(p string) string {
	if p == "" {
		return "."
	}
	return p
}
