package keys

import (
	"crypto/sha256"
	"sync"
	"testing"
)

// TestHashPresentedReusesOnlyTheSameKey: the hash kept from the last call
// is given back for the same key only, with keys taking turns, differing
// in one character at either end, and from many goroutines at once.
func TestHashPresentedReusesOnlyTheSameKey(t *testing.T) {
	a, err := newPlaintext()
	if err != nil {
		t.Fatal(err)
	}
	b, err := newPlaintext()
	if err != nil {
		t.Fatal(err)
	}
	flip := func(s string, i int) string {
		c := []byte(s)
		if c[i] == 'A' {
			c[i] = 'B'
		} else {
			c[i] = 'A'
		}
		return string(c)
	}
	keys := []string{a, a, b, a, flip(a, len(a)-1), a, flip(a, len(keyPrefix)), b, b}
	check := func(k string) {
		var buf [keyLen]byte
		want := sha256.Sum256(buf[:copy(buf[:], k)])
		got, err := HashPresented(k)
		if err != nil {
			t.Errorf("HashPresented(%q): %v", k, err)
			return
		}
		if got != want {
			t.Errorf("HashPresented(%q) = %x, want %x", k, got, want)
		}
	}
	for _, k := range keys {
		check(k)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				check(keys[(g+i)%len(keys)])
			}
		})
	}
	wg.Wait()
	if _, err := HashPresented(a[:keyLen-1]); err != ErrUnknown {
		t.Fatalf("a key one character short: %v, want ErrUnknown", err)
	}
}
