package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"unicode/utf8"
)

// objectStream reads a JSON object from a body one member at a time, so
// that one member's value (an upload's `fileData`) can be streamed without
// holding it in memory while the others, which are small, are read whole.
type objectStream struct {
	r *bufio.Reader
	// members counts the members read, to know whether a comma must come.
	members int
}

// errNotObject is the answer for a body that is not one JSON object.
var errNotObject = paramErrorf("The request body must be a JSON object")

// newObjectStream starts reading an object. An empty body is an object
// without members.
func newObjectStream(r io.Reader) (*objectStream, bool, error) {
	s := &objectStream{r: bufio.NewReaderSize(r, 32<<10)}
	c, err := s.skipSpace()
	if errors.Is(err, io.EOF) {
		return s, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if c != '{' {
		return nil, false, errNotObject
	}
	return s, true, nil
}

// skipSpace reads past white space and returns the next byte.
func (s *objectStream) skipSpace() (byte, error) {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return 0, err
		}
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		}
		return c, nil
	}
}

// next reads the next member's name; done is true at the end of the
// object, after which only white space may follow.
func (s *objectStream) next() (name string, done bool, err error) {
	c, err := s.skipSpace()
	if err != nil {
		return "", false, s.syntax(err)
	}
	if c == '}' {
		c, err := s.skipSpace()
		if !errors.Is(err, io.EOF) || c != 0 {
			return "", false, s.syntax(err)
		}
		return "", true, nil
	}
	if s.members > 0 {
		if c != ',' {
			return "", false, errNotObject
		}
		if c, err = s.skipSpace(); err != nil {
			return "", false, s.syntax(err)
		}
	}
	if c != '"' {
		return "", false, errNotObject
	}
	raw, err := s.rawString(maxParamName)
	if err != nil {
		return "", false, err
	}
	if err := jsonUnquote(raw, &name); err != nil {
		return "", false, errNotObject
	}
	if c, err = s.skipSpace(); err != nil || c != ':' {
		return "", false, s.syntax(err)
	}
	s.members++
	return name, false, nil
}

// syntax turns a read error inside the object into the caller's error: a
// body cut short or malformed is not a JSON object, while a failed read
// (the body limit, a dropped connection) stays what it is.
func (s *objectStream) syntax(err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errNotObject
	}
	return err
}

// maxParamName bounds a member's name.
const maxParamName = 256

// rawString reads the rest of a string whose opening quote was read, and
// returns it with both quotes. It refuses strings longer than limit.
func (s *objectStream) rawString(limit int) ([]byte, error) {
	out := []byte{'"'}
	escaped := false
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return nil, s.syntax(err)
		}
		out = append(out, c)
		if len(out) > limit {
			return nil, errTooLong
		}
		switch {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			return out, nil
		}
	}
}

// errTooLong is returned by rawString and rawValue past their limit.
var errTooLong = errors.New("value too long")

// rawValue reads one whole JSON value of at most limit bytes, checking only
// its framing (strings, brackets); the caller decodes it.
func (s *objectStream) rawValue(limit int) ([]byte, error) {
	c, err := s.skipSpace()
	if err != nil {
		return nil, s.syntax(err)
	}
	var out []byte
	depth := 0
	for {
		if c == '"' {
			str, err := s.rawString(limit - len(out))
			if err != nil {
				return nil, err
			}
			out = append(out, str...)
		} else {
			out = append(out, c)
			switch c {
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
		}
		if len(out) > limit {
			return nil, errTooLong
		}
		if depth < 0 {
			return nil, errNotObject
		}
		if depth == 0 {
			// A scalar ends where the next byte is not part of it.
			next, err := s.r.Peek(1)
			if err != nil || !scalarByte(next[0]) || c == '"' || c == '}' || c == ']' {
				return out, nil
			}
		}
		if c, err = s.r.ReadByte(); err != nil {
			return nil, s.syntax(err)
		}
	}
}

// scalarByte reports whether b may continue a number or a literal.
func scalarByte(b byte) bool {
	return b == '-' || b == '+' || b == '.' || '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z'
}

// stringValue starts reading a string value as a stream of its decoded
// bytes. null gives isNull; anything else but a string is an error.
func (s *objectStream) stringValue() (r io.Reader, isNull bool, err error) {
	c, err := s.skipSpace()
	if err != nil {
		return nil, false, s.syntax(err)
	}
	switch c {
	case '"':
		return &stringReader{s: s}, false, nil
	case 'n':
		rest := make([]byte, 3)
		if _, err := io.ReadFull(s.r, rest); err != nil || string(rest) != "ull" {
			return nil, false, errNotObject
		}
		return nil, true, nil
	}
	return nil, false, errNotString
}

// errNotString is returned by stringValue for a value of another type.
var errNotString = errors.New("not a string")

// stringReader yields the decoded bytes of a JSON string being read, up to
// its closing quote. Escapes are decoded; a `\u` escape of a character
// outside ASCII is written as UTF-8.
type stringReader struct {
	s *objectStream
	// pending holds decoded bytes of an escape that did not fit the last
	// read.
	pending []byte
	done    bool
}

func (sr *stringReader) Read(p []byte) (int, error) {
	n := copy(p, sr.pending)
	sr.pending = sr.pending[n:]
	if sr.done {
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
	for n < len(p) {
		if n > 0 && sr.s.r.Buffered() == 0 {
			break // hand over what is decoded rather than wait for more
		}
		c, err := sr.s.r.ReadByte()
		if err != nil {
			return n, sr.s.syntax(err)
		}
		switch c {
		case '"':
			sr.done = true
			if n == 0 && len(sr.pending) == 0 {
				return 0, io.EOF
			}
			return n, nil
		case '\\':
			decoded, err := sr.escape()
			if err != nil {
				return n, err
			}
			k := copy(p[n:], decoded)
			n += k
			sr.pending = append(sr.pending, decoded[k:]...)
		default:
			if c < ' ' {
				return n, errNotObject
			}
			p[n] = c
			n++
		}
	}
	return n, nil
}

// escape decodes an escape whose backslash was read.
func (sr *stringReader) escape() ([]byte, error) {
	c, err := sr.s.r.ReadByte()
	if err != nil {
		return nil, sr.s.syntax(err)
	}
	switch c {
	case '"', '\\', '/':
		return []byte{c}, nil
	case 'b':
		return []byte{'\b'}, nil
	case 'f':
		return []byte{'\f'}, nil
	case 'n':
		return []byte{'\n'}, nil
	case 'r':
		return []byte{'\r'}, nil
	case 't':
		return []byte{'\t'}, nil
	case 'u':
		hex := make([]byte, 4)
		if _, err := io.ReadFull(sr.s.r, hex); err != nil {
			return nil, sr.s.syntax(err)
		}
		v, err := strconv.ParseUint(string(hex), 16, 16)
		if err != nil {
			return nil, errNotObject
		}
		return utf8.AppendRune(nil, rune(v)), nil
	}
	return nil, errNotObject
}

// jsonUnquote decodes a raw JSON string.
func jsonUnquote(raw []byte, out *string) error {
	return json.Unmarshal(raw, out)
}
