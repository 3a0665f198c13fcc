package jsonscan

import (
	"math/rand/v2"
	"testing"
)

// plainASCII is the byte-at-a-time definition PlainASCII must agree with.
func plainASCII(s string) int {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x80 || b == '"' || b == '\\' {
			return i
		}
	}
	return len(s)
}

// TestPlainASCIIEveryByteEveryPlace puts every byte value at every place
// of strings of plain letters up to 24 bytes long, so that each lane of
// the eight-byte words and the tail loop meet each value.
func TestPlainASCIIEveryByteEveryPlace(t *testing.T) {
	base := []byte("abcdefghijklmnopqrstuvwx")
	for n := 0; n <= len(base); n++ {
		if got := PlainASCII(string(base[:n])); got != n {
			t.Fatalf("PlainASCII of %d plain bytes = %d", n, got)
		}
		for at := 0; at < n; at++ {
			for v := 0; v < 256; v++ {
				s := []byte(string(base[:n]))
				s[at] = byte(v)
				if got, want := PlainASCII(string(s)), plainASCII(string(s)); got != want {
					t.Fatalf("PlainASCII(%q) = %d, want %d", s, got, want)
				}
			}
		}
	}
}

// TestPlainASCIIRandom compares with the definition on random strings
// drawn mostly from the bytes next to the edges the word test draws
// (0x1f/0x20, the quote, the backslash, 0x7f/0x80).
func TestPlainASCIIRandom(t *testing.T) {
	edges := []byte{0x00, 0x1f, 0x20, 0x21, '"', '!', '#', '\\', '[', ']', 0x7e, 0x7f, 0x80, 0xff, 'a'}
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		s := make([]byte, r.IntN(40))
		for i := range s {
			if r.IntN(8) == 0 {
				s[i] = edges[r.IntN(len(edges))]
			} else {
				s[i] = byte(0x20 + r.IntN(0x60))
			}
		}
		if got, want := PlainASCII(string(s)), plainASCII(string(s)); got != want {
			t.Fatalf("PlainASCII(%q) = %d, want %d", s, got, want)
		}
	}
}

func BenchmarkPlainASCII(b *testing.B) {
	s := "Actor.bromIronfist0001 system.attributes.hp.value the quick brown fox jumps over the lazy dog"
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if PlainASCII(s) != len(s) {
			b.Fatal("not plain")
		}
	}
}

func BenchmarkPlainASCIINaive(b *testing.B) {
	s := "Actor.bromIronfist0001 system.attributes.hp.value the quick brown fox jumps over the lazy dog"
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if plainASCII(s) != len(s) {
			b.Fatal("not plain")
		}
	}
}
