package link

import (
	"io"
	"strings"
	"testing"
)

// piecesOf splits s into a chunks buffer cut at the given sizes.
func piecesOf(s string, size int) *chunks {
	c := &chunks{}
	for len(s) > 0 {
		n := min(size, len(s))
		c.bufs = append(c.bufs, []byte(s[:n]))
		c.n += int64(n)
		s = s[n:]
	}
	return c
}

// TestScanObjectAcrossPieces: the scanner finds the same members and
// values wherever the pieces are cut, through nested values, escapes and
// white space, and refuses what is not an object.
func TestScanObjectAcrossPieces(t *testing.T) {
	msg := ` { "type" : "download-file-result", "nested":{"a":[1,"}",{"b":"\""}]}, "n":-1.5e3,"ok":true,` +
		`"esc":"a\"b","requestId":"download-file_7","fileData":"data:text/plain;base64,aGVsbG8gd29ybGQ=" } `
	want := "type=download-file-result nested n ok esc(escaped) requestId=download-file_7 fileData=data:text/plain;base64,aGVsbG8gd29ybGQ="
	for size := 1; size <= len(msg); size++ {
		c := piecesOf(msg, size)
		var got []string
		var data field
		err := scanObject(c, func(f field) bool {
			switch {
			case f.escaped:
				got = append(got, f.key+"(escaped)")
			case f.isString:
				got = append(got, f.key+"="+string(c.copyOf(f.off+1, f.n-2)))
			default:
				got = append(got, f.key)
			}
			if f.key == "fileData" {
				data = f
			}
			return true
		})
		if err != nil || strings.Join(got, " ") != want {
			t.Fatalf("pieces of %d: %q %v", size, got, err)
		}
		body, n, err := dataURLBody(c, data)
		if err != nil || n != 11 {
			t.Fatalf("pieces of %d: %d %v", size, n, err)
		}
		if b, _ := io.ReadAll(body); string(b) != "hello world" {
			t.Fatalf("pieces of %d: decoded %q", size, b)
		}
	}
	for _, bad := range []string{`[1]`, `{"a":`, `{"a" 1}`, `{"a":"x`, ``} {
		if err := scanObject(piecesOf(bad, 2), func(field) bool { return true }); err == nil {
			t.Errorf("%q scanned as an object", bad)
		}
	}
	// An encoder that escapes slashes, and base64 that is not.
	c := piecesOf(`{"fileData":"data:text\/plain;base64,aGk="}`, 3)
	var f field
	_ = scanObject(c, func(x field) bool { f = x; return true })
	if body, n, err := dataURLBody(c, f); err != nil || n != 2 {
		t.Fatalf("escaped: %d %v", n, err)
	} else if b, _ := io.ReadAll(body); string(b) != "hi" {
		t.Fatalf("escaped: %q", b)
	}
	for _, bad := range []string{`{"fileData":"data:x;base64,a$=="}`, `{"fileData":"data:x;base64,abc"}`, `{"fileData":"nodata"}`, `{"fileData":3}`} {
		c := piecesOf(bad, 4)
		var f field
		_ = scanObject(c, func(x field) bool { f = x; return true })
		if _, _, err := dataURLBody(c, f); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}
