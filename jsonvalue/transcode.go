package jsonvalue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"unicode/utf16"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// The protobuf encoding of google.protobuf.Value, Struct and ListValue, as
// the transcoder writes it:
//
//	Value:     null_value = 1 (varint 0), number_value = 2 (fixed64),
//	           string_value = 3, bool_value = 4 (varint),
//	           struct_value = 5 (Struct), list_value = 6 (ListValue)
//	Struct:    fields = 1, a map entry per member: key = 1, value = 2
//	ListValue: values = 1, a Value per element
//
// Each tag below is the field number shifted left by three, or'ed with
// the wire type.
const (
	tagNull   = 1<<3 | byte(protowire.VarintType)
	tagNumber = 2<<3 | byte(protowire.Fixed64Type)
	tagString = 3<<3 | byte(protowire.BytesType)
	tagBool   = 4<<3 | byte(protowire.VarintType)
	tagStruct = 5<<3 | byte(protowire.BytesType)
	tagList   = 6<<3 | byte(protowire.BytesType)
	tagEntry  = 1<<3 | byte(protowire.BytesType) // Struct.fields and ListValue.values
	tagKey    = 1<<3 | byte(protowire.BytesType)
	tagValue  = 2<<3 | byte(protowire.BytesType)
)

// maxDepth bounds how deeply the transcoder follows nested JSON. A JSON
// object level is three levels of protobuf messages (Value, Struct, map
// entry) and an array level two, and protobuf's Go decoder refuses more
// than 10,000 levels: 3,000 JSON levels always decode. The relay stores
// nothing deeper than --max-json-depth (64 by default); only a script's
// result may nest deeper (up to 5,000 levels), and such a result is
// refused to a gRPC caller rather than sent undecodable.
const maxDepth = 3000

// ErrTooDeep is returned for JSON nested deeper than the transcoder
// follows (see maxDepth).
var ErrTooDeep = fmt.Errorf("jsonvalue: JSON nested deeper than %d levels, more than a gRPC caller can decode", maxDepth)

// errSyntax is returned for text that is not one JSON value.
var errSyntax = errors.New("jsonvalue: invalid JSON")

// AppendValue appends the protobuf encoding of the Value that the JSON
// text raw stands for (the message's content, without a tag or length) to
// dst. It reads the text twice, first to measure every nested message
// (protobuf writes a message's length before it), then to write, and
// builds nothing in between. Numbers become doubles, as in protojson;
// invalid UTF-8 in a string becomes U+FFFD, as in encoding/json.
func AppendValue(dst, raw []byte) ([]byte, error) {
	t, _, err := measured(raw)
	if err != nil {
		return dst, err
	}
	defer putTranscoder(t)
	return t.write(dst), nil
}

// measured returns a transcoder that has measured raw, ready to write it,
// and the length of raw's Value encoding. The transcoder goes back to its
// pool with putTranscoder.
func measured(raw []byte) (*transcoder, int, error) {
	t := getTranscoder(raw)
	size, err := t.measure()
	if err == nil {
		if t.skipSpace(); t.pos != len(raw) {
			err = errSyntax
		}
	}
	if err != nil {
		putTranscoder(t)
		return nil, 0, err
	}
	t.pos, t.next = 0, 0
	return t, size, nil
}

// transcoder reads one JSON text. sizes holds, in the order the values
// and keys come in the text, what the measuring pass found: for each value
// the length of its Value encoding, followed for a string by its decoded
// length and for an object or array by the length of its Struct or
// ListValue; for each object key its decoded length.
type transcoder struct {
	src   []byte
	pos   int
	depth int
	sizes []int
	next  int // the writing pass's position in sizes
}

var transcoders = sync.Pool{New: func() any { return new(transcoder) }}

func getTranscoder(raw []byte) *transcoder {
	t := transcoders.Get().(*transcoder)
	t.src, t.pos, t.depth, t.sizes, t.next = raw, 0, 0, t.sizes[:0], 0
	return t
}

func putTranscoder(t *transcoder) {
	t.src = nil
	if cap(t.sizes) <= 1<<16 {
		transcoders.Put(t)
	}
}

func (t *transcoder) skipSpace() {
	for t.pos < len(t.src) {
		switch t.src[t.pos] {
		case ' ', '\t', '\n', '\r':
			t.pos++
		default:
			return
		}
	}
}

// measure reads one value and returns the length of its Value encoding,
// recording it (and what else the writing pass needs) in sizes.
func (t *transcoder) measure() (int, error) {
	t.skipSpace()
	if t.pos >= len(t.src) {
		return 0, errSyntax
	}
	slot := len(t.sizes)
	t.sizes = append(t.sizes, 0)
	var size int
	switch c := t.src[t.pos]; {
	case c == 'n':
		if err := t.literal("null"); err != nil {
			return 0, err
		}
		size = 2
	case c == 't':
		if err := t.literal("true"); err != nil {
			return 0, err
		}
		size = 2
	case c == 'f':
		if err := t.literal("false"); err != nil {
			return 0, err
		}
		size = 2
	case c == '"':
		n, err := t.measureString()
		if err != nil {
			return 0, err
		}
		t.sizes = append(t.sizes, n)
		n = decodedLen(n)
		size = 1 + protowire.SizeBytes(n)
	case c == '-' || (c >= '0' && c <= '9'):
		if _, err := t.number(); err != nil {
			return 0, err
		}
		size = 9
	case c == '{':
		t.sizes = append(t.sizes, 0)
		n, err := t.measureObject()
		if err != nil {
			return 0, err
		}
		t.sizes[slot+1] = n
		size = 1 + protowire.SizeBytes(n)
	case c == '[':
		t.sizes = append(t.sizes, 0)
		n, err := t.measureArray()
		if err != nil {
			return 0, err
		}
		t.sizes[slot+1] = n
		size = 1 + protowire.SizeBytes(n)
	default:
		return 0, errSyntax
	}
	t.sizes[slot] = size
	return size, nil
}

// enter and leave count nesting.
func (t *transcoder) enter() error {
	if t.depth++; t.depth > maxDepth {
		return ErrTooDeep
	}
	return nil
}

func (t *transcoder) leave() { t.depth-- }

// measureObject returns the length of the Struct an object becomes.
func (t *transcoder) measureObject() (int, error) {
	if err := t.enter(); err != nil {
		return 0, err
	}
	defer t.leave()
	t.pos++ // {
	total := 0
	t.skipSpace()
	if t.pos < len(t.src) && t.src[t.pos] == '}' {
		t.pos++
		return 0, nil
	}
	for {
		t.skipSpace()
		if t.pos >= len(t.src) || t.src[t.pos] != '"' {
			return 0, errSyntax
		}
		k, err := t.measureString()
		if err != nil {
			return 0, err
		}
		t.sizes = append(t.sizes, k)
		k = decodedLen(k)
		t.skipSpace()
		if t.pos >= len(t.src) || t.src[t.pos] != ':' {
			return 0, errSyntax
		}
		t.pos++
		v, err := t.measure()
		if err != nil {
			return 0, err
		}
		total += 1 + protowire.SizeBytes(entrySize(k, v))
		t.skipSpace()
		if t.pos >= len(t.src) {
			return 0, errSyntax
		}
		switch t.src[t.pos] {
		case ',':
			t.pos++
		case '}':
			t.pos++
			return total, nil
		default:
			return 0, errSyntax
		}
	}
}

// entrySize is the length of a Struct's map entry with a key of k bytes
// and a Value of v bytes.
func entrySize(k, v int) int {
	return 1 + protowire.SizeBytes(k) + 1 + protowire.SizeBytes(v)
}

// measureArray returns the length of the ListValue an array becomes.
func (t *transcoder) measureArray() (int, error) {
	if err := t.enter(); err != nil {
		return 0, err
	}
	defer t.leave()
	t.pos++ // [
	total := 0
	t.skipSpace()
	if t.pos < len(t.src) && t.src[t.pos] == ']' {
		t.pos++
		return 0, nil
	}
	for {
		v, err := t.measure()
		if err != nil {
			return 0, err
		}
		total += 1 + protowire.SizeBytes(v)
		t.skipSpace()
		if t.pos >= len(t.src) {
			return 0, errSyntax
		}
		switch t.src[t.pos] {
		case ',':
			t.pos++
		case ']':
			t.pos++
			return total, nil
		default:
			return 0, errSyntax
		}
	}
}

func (t *transcoder) literal(word string) error {
	if len(t.src)-t.pos < len(word) || string(t.src[t.pos:t.pos+len(word)]) != word {
		return errSyntax
	}
	t.pos += len(word)
	return nil
}

// number checks one JSON number and returns its text.
func (t *transcoder) number() ([]byte, error) {
	start := t.pos
	s := t.src
	i := t.pos
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && s[i] >= '1' && s[i] <= '9':
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	default:
		return nil, errSyntax
	}
	if i < len(s) && s[i] == '.' {
		i++
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, errSyntax
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if i >= len(s) || s[i] < '0' || s[i] > '9' {
			return nil, errSyntax
		}
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
	}
	t.pos = i
	return s[start:i], nil
}

// measureString checks one JSON string and returns the length of its
// UTF-8 text once decoded, as sizes records it: the length for a string
// with escapes or invalid UTF-8, its complement (^n, below zero) for a
// plain string, whose text is its decoded text and is copied as it is.
func (t *transcoder) measureString() (int, error) {
	s := t.src
	i := t.pos + 1
	n := 0
	plain := true
	for {
		// The common run of plain ASCII.
		start := i
		i = plainRun(s, i)
		n += i - start
		if i >= len(s) {
			return 0, errSyntax
		}
		switch c := s[i]; {
		case c == '"':
			t.pos = i + 1
			if plain {
				return ^n, nil
			}
			return n, nil
		case c < 0x20:
			return 0, errSyntax
		case c == '\\':
			r, size, err := unescape(s[i:])
			if err != nil {
				return 0, err
			}
			n += utf8.RuneLen(r)
			i += size
			plain = false
		default:
			r, size := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && size == 1 {
				n += 3 // U+FFFD
				plain = false
			} else {
				n += size
			}
			i += size
		}
	}
}

// plainRun returns the index of the first byte of s from i on that ends a
// run of plain string text (a quote, a backslash, a control character or
// a byte outside ASCII), or len(s). It looks at eight bytes at a time:
// strings are most of a document's text.
func plainRun(s []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(s); i += 8 {
		x := binary.LittleEndian.Uint64(s[i:])
		quote := x ^ (ones * '"')
		backslash := x ^ (ones * '\\')
		// A byte is flagged when it is zero after the xor (the quote or
		// the backslash), below 0x20, or has its high bit set.
		special := ((quote - ones) &^ quote) | ((backslash - ones) &^ backslash) | (x - ones*0x20) | x
		if special&highs != 0 {
			break
		}
	}
	for i < len(s) && s[i] >= 0x20 && s[i] < utf8.RuneSelf && s[i] != '"' && s[i] != '\\' {
		i++
	}
	return i
}

// decodedLen is the decoded length of a string as sizes records it.
func decodedLen(recorded int) int {
	if recorded < 0 {
		return ^recorded
	}
	return recorded
}

// unescape reads one escape sequence at the start of s (a backslash and
// what follows) and returns the rune it stands for and its length. A lone
// surrogate becomes U+FFFD.
func unescape(s []byte) (rune, int, error) {
	if len(s) < 2 {
		return 0, 0, errSyntax
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		r, ok := hex4(s[2:])
		if !ok {
			return 0, 0, errSyntax
		}
		if utf16.IsSurrogate(r) {
			if len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
				if r2, ok := hex4(s[8:]); ok {
					if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
						return dec, 12, nil
					}
				}
			}
			return utf8.RuneError, 6, nil
		}
		return r, 6, nil
	}
	return 0, 0, errSyntax
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// take returns the next recorded size.
func (t *transcoder) take() int {
	n := t.sizes[t.next]
	t.next++
	return n
}

// write writes the value the measuring pass read at the same place: its
// Value encoding, without tag or length (those are its container's). The
// text is known to be valid.
func (t *transcoder) write(dst []byte) []byte {
	t.skipSpace()
	t.next++ // the value's own length, which its container already used
	switch t.src[t.pos] {
	case 'n':
		t.pos += 4
		return append(dst, tagNull, 0)
	case 't':
		t.pos += 4
		return append(dst, tagBool, 1)
	case 'f':
		t.pos += 5
		return append(dst, tagBool, 0)
	case '"':
		dst = append(dst, tagString)
		return t.writeString(dst)
	case '{':
		return t.writeObject(dst)
	case '[':
		return t.writeArray(dst)
	}
	text, _ := t.number()
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		f = math.NaN() // never: the text is a valid number
	}
	dst = append(dst, tagNumber)
	return protowire.AppendFixed64(dst, math.Float64bits(f))
}

// writeString writes a string's length and decoded text.
func (t *transcoder) writeString(dst []byte) []byte {
	recorded := t.take()
	if recorded < 0 {
		// A plain string: its text as it is, without a second look.
		n := ^recorded
		dst = protowire.AppendVarint(dst, uint64(n))
		dst = append(dst, t.src[t.pos+1:t.pos+1+n]...)
		t.pos += n + 2
		return dst
	}
	dst = protowire.AppendVarint(dst, uint64(recorded))
	s := t.src
	i := t.pos + 1
	for {
		start := i
		i = plainRun(s, i)
		dst = append(dst, s[start:i]...)
		switch c := s[i]; {
		case c == '"':
			t.pos = i + 1
			return dst
		case c == '\\':
			r, size, _ := unescape(s[i:])
			dst = utf8.AppendRune(dst, r)
			i += size
		default:
			r, size := utf8.DecodeRune(s[i:])
			dst = utf8.AppendRune(dst, r) // U+FFFD for an invalid byte
			i += size
		}
	}
}

func (t *transcoder) writeObject(dst []byte) []byte {
	dst = append(dst, tagStruct)
	dst = protowire.AppendVarint(dst, uint64(t.take()))
	t.pos++ // {
	for {
		t.skipSpace()
		if t.src[t.pos] == '}' {
			t.pos++
			return dst
		}
		if t.src[t.pos] == ',' {
			t.pos++
			t.skipSpace()
		}
		// A key's decoded length is recorded just before its value's
		// length (measureObject).
		k, v := decodedLen(t.sizes[t.next]), t.sizes[t.next+1]
		dst = append(dst, tagEntry)
		dst = protowire.AppendVarint(dst, uint64(entrySize(k, v)))
		dst = append(dst, tagKey)
		dst = t.writeString(dst) // takes the key's length
		t.skipSpace()
		t.pos++ // :
		dst = append(dst, tagValue)
		dst = protowire.AppendVarint(dst, uint64(v))
		dst = t.write(dst)
	}
}

func (t *transcoder) writeArray(dst []byte) []byte {
	dst = append(dst, tagList)
	dst = protowire.AppendVarint(dst, uint64(t.take()))
	t.pos++ // [
	for {
		t.skipSpace()
		switch t.src[t.pos] {
		case ']':
			t.pos++
			return dst
		case ',':
			t.pos++
			continue
		}
		v := t.sizes[t.next]
		dst = append(dst, tagEntry)
		dst = protowire.AppendVarint(dst, uint64(v))
		dst = t.write(dst)
	}
}
