package files

import (
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/world"
)

// Limits on paths.
const (
	// MaxPathBytes bounds a whole relative path.
	MaxPathBytes = 1024
	// MaxNameBytes bounds one path segment (the usual file system limit).
	MaxNameBytes = 255
)

// tempPrefix starts the names of the temporary files of writes in
// progress. Such names are hidden from listings and refused in paths.
const tempPrefix = ".relay-upload-"

// Clean checks a path relative to the file area and returns it in its
// canonical form: segments joined by `/`, without empty or `.` segments;
// "" is the area's root (as are "/" and "."). Anything that could name a
// place outside the area, or that no sane client sends, is ErrInvalid.
func Clean(p string) (string, error) {
	if p == "/" {
		return "", nil
	}
	if err := checkText(p); err != nil {
		return "", err
	}
	if strings.HasPrefix(p, "/") {
		return "", world.Errorf(world.ErrInvalid, "Absolute paths are not allowed: %s", p)
	}
	if hasScheme(p) {
		return "", world.Errorf(world.ErrInvalid, "Paths must be relative to the file area, not URLs: %s", p)
	}
	if strings.Contains(p, "%") {
		if err := checkEncoded(p); err != nil {
			return "", err
		}
	}
	var segs []string
	for _, s := range strings.Split(p, "/") {
		switch {
		case s == "" || s == ".":
			continue
		case s == "..":
			return "", world.Errorf(world.ErrInvalid, "Paths must not contain '..': %s", p)
		case len(s) > MaxNameBytes:
			return "", world.Errorf(world.ErrInvalid, "Name too long: at most %d bytes per path segment", MaxNameBytes)
		case strings.HasPrefix(s, tempPrefix):
			return "", world.Errorf(world.ErrInvalid, "Names starting with %s are reserved", tempPrefix)
		}
		segs = append(segs, s)
	}
	return strings.Join(segs, "/"), nil
}

// CleanName checks a file name (one path segment, by the rules of
// [Clean]) and returns it; an empty or `.` name is ErrInvalid.
func CleanName(name string) (string, error) {
	return cleanName(name)
}

// cleanName checks a file name: one path segment.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", world.Errorf(world.ErrInvalid, "'filename' is required")
	}
	if strings.Contains(name, "/") {
		return "", world.Errorf(world.ErrInvalid, "'filename' must be a name, not a path: %s", name)
	}
	clean, err := Clean(name)
	if err != nil {
		return "", err
	}
	if clean == "" {
		return "", world.Errorf(world.ErrInvalid, "Invalid file name: %s", name)
	}
	return clean, nil
}

// checkText refuses paths that are too long, not UTF-8, or hold control
// characters (NUL included) or backslashes.
func checkText(p string) error {
	if len(p) > MaxPathBytes {
		return world.Errorf(world.ErrInvalid, "Path too long: at most %d bytes", MaxPathBytes)
	}
	if !utf8.ValidString(p) {
		return world.Errorf(world.ErrInvalid, "Paths must be valid UTF-8")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return world.Errorf(world.ErrInvalid, "Paths must not contain control characters: %q", p)
		}
		if r == '\\' {
			return world.Errorf(world.ErrInvalid, "Paths must use '/' as separator: %s", p)
		}
	}
	return nil
}

// checkEncoded refuses a path whose percent-decoded forms (decoded up to
// three times, as a careless layer might) would hold a traversal. The path
// itself is used as given: `a%20b.png` is a file of that very name.
func checkEncoded(p string) error {
	cur := p
	for range 3 {
		next, err := url.PathUnescape(cur)
		if err != nil || next == cur {
			return nil
		}
		cur = next
		bad := strings.HasPrefix(cur, "/") || strings.ContainsAny(cur, "\\\x00") || hasScheme(cur)
		for _, s := range strings.Split(cur, "/") {
			if s == ".." {
				bad = true
			}
		}
		if bad {
			return world.Errorf(world.ErrInvalid, "Paths must not contain encoded traversal: %s", p)
		}
	}
	return nil
}

// hasScheme reports whether a path starts like a URL or a drive letter: a
// first segment of a letter, then letters, digits, `+`, `-` or `.`, then
// a colon (`http:`, `file:`, `C:`). A tabletop fetches such a path as an
// address of its own rather than as a file of its area, so no world takes
// one.
func hasScheme(p string) bool {
	first, _, _ := strings.Cut(p, "/")
	colon := strings.IndexByte(first, ':')
	if colon < 1 {
		return false
	}
	for i, r := range first[:colon] {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '+' || r == '-' || r == '.'):
		default:
			return false
		}
	}
	return true
}
