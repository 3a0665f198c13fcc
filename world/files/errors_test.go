package files

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/tabletop-relay/relay/world"
)

// TestErrorsHideTheAreaPath: errors of the file system name the area's
// absolute path (an os.Root's files carry it in their names); the message
// a caller sees names only the path inside the area, and the error, with
// the absolute path, is kept as the cause for the log.
func TestErrorsHideTheAreaPath(t *testing.T) {
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	f, err := root.Create("x.bin")
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // writing now fails with the file's absolute name
	_, err = copyLimited(context.Background(), f, strings.NewReader("data"), 0)
	checkHidden(t, "a failed write", err, dir, world.ErrUnavailable, "Could not write the file")

	for _, tc := range []struct {
		errno error
		kind  error
		msg   string
	}{
		{syscall.EIO, world.ErrUnavailable, "File system error on maps/a.svg: input/output error"},
		{syscall.ENOSPC, world.ErrUnavailable, "File system error on maps/a.svg: no space left on device"},
		{syscall.EACCES, world.ErrUnavailable, "Access denied by the file system: maps/a.svg"},
		{syscall.ENOTDIR, world.ErrNotFound, "Path not found: maps/a.svg (a part of it is a file)"},
		{syscall.ENOENT, world.ErrNotFound, "Path not found: maps/a.svg"},
	} {
		perr := &fs.PathError{Op: "open", Path: dir + "/maps/a.svg", Err: tc.errno}
		checkHidden(t, tc.errno.Error(), fsError(perr, "maps/a.svg"), dir, tc.kind, tc.msg)
	}
	checkHidden(t, "another error", fsError(errors.New("open "+dir+": odd"), "maps"), dir, world.ErrUnavailable, "File system error on maps")
}

func checkHidden(t *testing.T, what string, err error, dir string, kind error, msg string) {
	t.Helper()
	var werr *world.Error
	if !errors.As(err, &werr) || !errors.Is(err, kind) || werr.Msg != msg || err.Error() != msg {
		t.Fatalf("%s: %v, want %v %q", what, err, kind, msg)
	}
	if strings.Contains(err.Error(), dir) {
		t.Fatalf("%s: the message shows the area's path: %s", what, err)
	}
	if kind == world.ErrUnavailable && (werr.Cause == nil || !strings.Contains(werr.Cause.Error(), dir)) {
		t.Fatalf("%s: the cause for the log is %v", what, werr.Cause)
	}
}
