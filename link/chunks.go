package link

import (
	"bytes"
	"errors"
	"io"
)

// Files cross the link as one WebSocket message each, as base64 in a JSON
// string (the module's `upload-file` and `download-file`, reference §6), so
// a 64 MiB file is an 85 MiB message. The relay holds such a message whole
// once and no more: an upload is encoded straight into a chunks buffer and
// written from it to the socket, and a download is read from the socket
// into one and decoded from it while the caller receives the file (see
// largefile.go). The buffer is a list of pieces, so that it never grows by
// copying what it holds.

// Sizes of a chunks buffer's pieces: small first, so that the many short
// messages cost little, then chunkMax.
const (
	chunkMin = 4 << 10
	chunkMax = 1 << 20
)

// chunks is a byte buffer kept as a list of pieces. The zero value is
// empty and ready to use.
type chunks struct {
	bufs [][]byte
	n    int64
}

// Len returns the number of bytes held.
func (c *chunks) Len() int64 { return c.n }

// space returns the free room of the last piece, adding a piece when it
// is full.
func (c *chunks) space() []byte {
	if k := len(c.bufs); k > 0 {
		last := c.bufs[k-1]
		if len(last) < cap(last) {
			return last[len(last):cap(last)]
		}
	}
	size := chunkMin
	if k := len(c.bufs); k > 0 {
		size = min(chunkMax, 4*cap(c.bufs[k-1]))
	}
	c.bufs = append(c.bufs, make([]byte, 0, size))
	last := c.bufs[len(c.bufs)-1]
	return last[:cap(last)]
}

// grow records n bytes written into the last piece's free room.
func (c *chunks) grow(n int) {
	last := &c.bufs[len(c.bufs)-1]
	*last = (*last)[:len(*last)+n]
	c.n += int64(n)
}

// Write implements io.Writer.
func (c *chunks) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		n := copy(c.space(), p)
		c.grow(n)
		p = p[n:]
	}
	return total, nil
}

// WriteString writes s.
func (c *chunks) WriteString(s string) {
	for len(s) > 0 {
		n := copy(c.space(), s)
		c.grow(n)
		s = s[n:]
	}
}

// ReadFrom reads r to its end straight into the pieces.
func (c *chunks) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		room := c.space()
		n, err := r.Read(room)
		c.grow(n)
		total += int64(n)
		if errors.Is(err, io.EOF) {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// WriteTo implements io.WriterTo: each piece is written as it is.
func (c *chunks) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for _, b := range c.bufs {
		n, err := w.Write(b)
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Bytes returns the content in one slice: the only piece itself, or else
// a copy joining them.
func (c *chunks) Bytes() []byte {
	switch len(c.bufs) {
	case 0:
		return nil
	case 1:
		return c.bufs[0]
	}
	out := make([]byte, 0, c.n)
	for _, b := range c.bufs {
		out = append(out, b...)
	}
	return out
}

// section returns the pieces' slices covering [off, off+n), without
// copying.
func (c *chunks) section(off, n int64) [][]byte {
	var out [][]byte
	for _, b := range c.bufs {
		if n <= 0 {
			break
		}
		if off >= int64(len(b)) {
			off -= int64(len(b))
			continue
		}
		part := b[off:]
		off = 0
		if int64(len(part)) > n {
			part = part[:n]
		}
		out = append(out, part)
		n -= int64(len(part))
	}
	return out
}

// copyOf returns a copy of [off, off+n), for the small values read out of
// a large message.
func (c *chunks) copyOf(off, n int64) []byte {
	out := make([]byte, 0, n)
	for _, p := range c.section(off, n) {
		out = append(out, p...)
	}
	return out
}

// reader reads [off, off+n) without copying the pieces.
func (c *chunks) reader(off, n int64) io.Reader {
	parts := c.section(off, n)
	rs := make([]io.Reader, len(parts))
	for i, p := range parts {
		rs[i] = bytes.NewReader(p)
	}
	return io.MultiReader(rs...)
}

// cursor walks a chunks buffer byte by byte, for the scanner.
type cursor struct {
	c   *chunks
	i   int   // the piece
	j   int   // the offset in it
	off int64 // the offset from the start
}

// peek returns the current byte; false at the end.
func (k *cursor) peek() (byte, bool) {
	for k.i < len(k.c.bufs) && k.j >= len(k.c.bufs[k.i]) {
		k.i, k.j = k.i+1, 0
	}
	if k.i >= len(k.c.bufs) {
		return 0, false
	}
	return k.c.bufs[k.i][k.j], true
}

// next consumes the current byte.
func (k *cursor) next() (byte, bool) {
	b, ok := k.peek()
	if ok {
		k.j++
		k.off++
	}
	return b, ok
}

// skipSpace consumes JSON white space.
func (k *cursor) skipSpace() {
	for {
		b, ok := k.peek()
		if !ok || (b != ' ' && b != '\t' && b != '\n' && b != '\r') {
			return
		}
		k.next()
	}
}

// skipString consumes a JSON string whose opening quote was consumed, and
// reports whether it held escapes. Long runs are skipped a piece at a
// time.
func (k *cursor) skipString() (escaped bool, ok bool) {
	for {
		if _, more := k.peek(); !more {
			return escaped, false
		}
		rest := k.c.bufs[k.i][k.j:]
		q := bytes.IndexAny(rest, `"\`)
		if q < 0 {
			k.j += len(rest)
			k.off += int64(len(rest))
			continue
		}
		k.j += q
		k.off += int64(q)
		b, _ := k.next()
		if b == '"' {
			return escaped, true
		}
		escaped = true
		if _, ok := k.next(); !ok { // the escaped character
			return escaped, false
		}
	}
}

// skipValue consumes one JSON value of any kind (its syntax is checked
// only as far as finding its end).
func (k *cursor) skipValue() bool {
	b, ok := k.next()
	if !ok {
		return false
	}
	switch b {
	case '"':
		_, ok := k.skipString()
		return ok
	case '{', '[':
		depth := 1
		for depth > 0 {
			b, ok := k.next()
			if !ok {
				return false
			}
			switch b {
			case '"':
				if _, ok := k.skipString(); !ok {
					return false
				}
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		return true
	}
	// A number, true, false or null: up to the next delimiter.
	for {
		b, ok := k.peek()
		if !ok || b == ',' || b == '}' || b == ']' || b == ' ' || b == '\n' || b == '\r' || b == '\t' {
			return true
		}
		k.next()
	}
}

// field is one top-level member of a JSON object in a chunks buffer: its
// key, and where its value lies.
type field struct {
	key      string
	off, n   int64
	isString bool
	escaped  bool // a string holding escapes
}

// errNotObject is the scanner's answer to anything but a JSON object.
var errNotObject = errors.New("not a JSON object")

// scanObject calls visit with each top-level member of the JSON object in
// c, in order, until visit returns false. It reads the keys and finds the
// values' ends without copying the values.
func scanObject(c *chunks, visit func(f field) bool) error {
	k := &cursor{c: c}
	k.skipSpace()
	if b, ok := k.next(); !ok || b != '{' {
		return errNotObject
	}
	for {
		k.skipSpace()
		b, ok := k.next()
		if !ok {
			return errNotObject
		}
		if b == '}' {
			return nil
		}
		if b == ',' {
			continue
		}
		if b != '"' {
			return errNotObject
		}
		start := k.off
		escaped, ok := k.skipString()
		if !ok {
			return errNotObject
		}
		key := string(c.copyOf(start, k.off-1-start))
		if escaped {
			key = "" // no key the relay reads has escapes
		}
		k.skipSpace()
		if b, ok := k.next(); !ok || b != ':' {
			return errNotObject
		}
		k.skipSpace()
		f := field{key: key, off: k.off}
		if b, _ := k.peek(); b == '"' {
			k.next()
			f.isString = true
			if f.escaped, ok = k.skipString(); !ok {
				return errNotObject
			}
		} else if !k.skipValue() {
			return errNotObject
		}
		f.n = k.off - f.off
		if !visit(f) {
			return nil
		}
	}
}
