package link

import (
	"path"
	"strings"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/files"
)

// A linked world's files are checked by the embedded world's path rules
// (files.Clean) before anything is sent: the module takes any path as it
// comes, hands `..` and absolute paths to the tabletop's file browser and
// fetches a path that starts with `http` from the game master's browser,
// so a path the relay let through could read another server's bytes or
// files outside the world's area. The module is sent the cleaned path.

// cleanDirPath checks a directory path of a listing or an upload and
// returns its canonical form ("" for the area's root).
func cleanDirPath(p string) (string, error) {
	return files.Clean(p)
}

// cleanFilePath checks the path of a file to read.
func cleanFilePath(p string) (string, error) {
	clean, err := files.Clean(p)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", world.Errorf(world.ErrInvalid, "'path' must name a file")
	}
	return clean, nil
}

// cleanUpload checks the directory and name of a file to write.
func cleanUpload(dir, name string) (string, string, error) {
	cleanDir, err := cleanDirPath(dir)
	if err != nil {
		return "", "", err
	}
	cleanName, err := files.CleanName(name)
	if err != nil {
		return "", "", err
	}
	if len(path.Join(cleanDir, cleanName)) > files.MaxPathBytes {
		return "", "", world.Errorf(world.ErrInvalid, "Path too long: at most %d bytes", files.MaxPathBytes)
	}
	return cleanDir, cleanName, nil
}

// listingDepth is the depth a listing keeps, by the embedded world's
// rules: files.DefaultDepth when 0, at most files.MaxDepth, 1 when not
// recursive.
func listingDepth(recursive bool, depth int) (int, error) {
	switch {
	case depth > files.MaxDepth:
		return 0, world.Errorf(world.ErrInvalid, "'depth' must be at most %d", files.MaxDepth)
	case !recursive:
		return 1, nil
	case depth <= 0:
		return files.DefaultDepth, nil
	}
	return depth, nil
}

// levelBelow is how many levels entry lies below dir (1 for an entry of
// dir itself); both are paths of the area, "" being its root.
func levelBelow(dir, entry string) int {
	rel := strings.Trim(entry, "/")
	if dir != "" {
		rel = strings.TrimPrefix(rel, dir+"/")
	}
	return strings.Count(rel, "/") + 1
}
