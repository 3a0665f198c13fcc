package clientid

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// pattern is the regular expression Valid replaces; the tests hold Valid
// to it.
var pattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

func TestValidAgreesWithThePattern(t *testing.T) {
	check := func(id string) {
		t.Helper()
		if got, want := Valid(id), pattern.MatchString(id); got != want {
			t.Fatalf("Valid(%q) = %v, the pattern says %v", id, got, want)
		}
	}
	// Every byte value at the first, a middle and the last place.
	for v := 0; v < 256; v++ {
		b := string([]byte{byte(v)})
		check(b)
		check(b + "world")
		check("wo" + b + "rld")
		check("world" + b)
		check("world" + b + "\n")
	}
	// The length bounds, with and without a trailing newline (which a
	// pattern ending in $ could let through in other dialects).
	for n := 0; n <= MaxLen+2; n++ {
		check(strings.Repeat("a", n))
		check(strings.Repeat("a", n) + "\n")
		check("-" + strings.Repeat("a", n))
		check("9" + strings.Repeat("_", n))
	}
	check("demo")
	check("Demo-World_2")
	check("wörld")
	// Random ids over an alphabet of allowed and refused bytes.
	alphabet := []byte("aZ09_-. /\n\x00\x7f\xc3\xa9")
	r := rand.New(rand.NewPCG(3, 4))
	for range 100000 {
		id := make([]byte, r.IntN(70))
		for i := range id {
			if r.IntN(6) == 0 {
				id[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				id[i] = "abcXYZ789_-"[r.IntN(11)]
			}
		}
		check(string(id))
	}
}

func BenchmarkValid(b *testing.B) {
	for b.Loop() {
		if !Valid("demo-world_0001") {
			b.Fatal("refused")
		}
	}
}
