// Package jsonscan finds, eight bytes at a time, how much of a string a
// JSON encoder may copy as it is. The relay's encoders (documents, REST
// answers, access lines) quote strings byte by byte where a byte needs an
// escape; most strings need none, and a byte-at-a-time scan for the rare
// one was a visible share of the instructions a read or a write costs.
package jsonscan

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// MinRun is the length below which calling PlainASCII costs more than it
// saves: for the short keys and values most documents are made of, an
// encoder's own byte loop is quicker than the call.
const MinRun = 16

// PlainASCII returns the length of the longest prefix of s whose bytes
// are ASCII, at least 0x20, and neither a double quote nor a backslash:
// the bytes every JSON encoder writes unescaped.
func PlainASCII(s string) int {
	n := len(s)
	if n < 8 {
		return plainBytes(s)
	}
	for i := 0; ; {
		w := s[i : i+8]
		x := uint64(w[0]) | uint64(w[1])<<8 | uint64(w[2])<<16 | uint64(w[3])<<24 |
			uint64(w[4])<<32 | uint64(w[5])<<40 | uint64(w[6])<<48 | uint64(w[7])<<56
		// A byte at or above 0x80 sets its own high bit. Once there is
		// none, x-ones*0x20 sets the high bit of a byte below 0x20, and
		// hasZero marks a byte equal to the quote or the backslash; each
		// test may also mark bytes beyond the first one it finds, which
		// only sends a word that is not plain to the byte loop.
		if (x|(x-ones*0x20)&^x|hasZero(x^(ones*'"'))|hasZero(x^(ones*'\\')))&highs != 0 {
			return i + plainBytes(w)
		}
		if i+8 == n {
			return n
		}
		// The last word may overlap the one before: its bytes there are
		// plain, so the first byte that is not lies past them.
		i = min(i+8, n-8)
	}
}

// plainBytes is PlainASCII one byte at a time.
func plainBytes(s string) int {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x80 || b == '"' || b == '\\' {
			return i
		}
	}
	return len(s)
}

// hasZero has the high bit of some byte set if and only if x has a zero
// byte.
func hasZero(x uint64) uint64 { return (x - ones) &^ x & highs }
