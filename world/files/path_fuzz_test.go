package files_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tabletop-relay/relay/world"
	"github.com/tabletop-relay/relay/world/files"
)

// FuzzClean checks the file area's path check: any text is either refused
// with ErrInvalid or cleaned into a canonical, local path that cannot leave
// the area, even after percent-decoding. `go test` runs the seeds; `make
// fuzz` explores.
func FuzzClean(f *testing.F) {
	for _, seed := range []string{
		"", "/", ".", "maps/dungeon.webp", "a//b/./c", "../secret", "a/../../b", "/etc/passwd",
		"a\\..\\b", "a\x00b", "%2e%2e/secret", "%252e%252e%252fsecret", "%25252e%25252e/x",
		"a%2fb", "a%20b.png", "%zz", ".relay-upload-123", "a/.relay-upload-x/b",
		"\xff\xfe", "caf\u00e9/\u202e.png", strings.Repeat("a", 256), strings.Repeat("a/", 600),
		"..", "...", "./..", "a/..", "\u2025/x", "a/\u0085b",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, p string) {
		clean, err := files.Clean(p)
		if err != nil {
			if !errors.Is(err, world.ErrInvalid) {
				t.Fatalf("Clean(%q): error %v is not ErrInvalid", p, err)
			}
			return
		}
		if clean == "" {
			return // the area's root
		}
		if !filepath.IsLocal(clean) || strings.HasPrefix(clean, "/") {
			t.Fatalf("Clean(%q) = %q is not a local path", p, clean)
		}
		if !utf8.ValidString(clean) || len(clean) > files.MaxPathBytes {
			t.Fatalf("Clean(%q) = %q: invalid text or too long", p, clean)
		}
		for _, seg := range strings.Split(clean, "/") {
			if seg == "" || seg == "." || seg == ".." || len(seg) > files.MaxNameBytes || strings.ContainsAny(seg, "\\\x00") {
				t.Fatalf("Clean(%q) = %q has segment %q", p, clean, seg)
			}
		}
		for _, r := range clean {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("Clean(%q) = %q holds a control character", p, clean)
			}
		}
		if again, err := files.Clean(clean); err != nil || again != clean {
			t.Fatalf("Clean is not idempotent: Clean(%q) = %q, %v", clean, again, err)
		}
		root := filepath.FromSlash("/area")
		if joined := filepath.Join(root, clean); !strings.HasPrefix(joined, root+string(filepath.Separator)) {
			t.Fatalf("Clean(%q) = %q leaves the area: %s", p, clean, joined)
		}
	})
}
