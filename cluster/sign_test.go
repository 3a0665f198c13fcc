package cluster

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestSignerRefusesForgedStaleAndReplayed: a signed message passes once;
// a copy, a message changed in its subject, headers or data, one signed
// with another secret, one outside the clock window either way, and one
// without a signature are refused; the nonces remembered stay bounded and
// expire with the window.
func TestSignerRefusesForgedStaleAndReplayed(t *testing.T) {
	secret := strings.Repeat("s", 32)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	sender, receiver := newSigner(secret), newSigner(secret)
	sender.now, receiver.now = clock, clock
	signed := func(edit func(*nats.Msg)) *nats.Msg {
		m := nats.NewMsg("relay.node.n2.call")
		m.Header.Set(hdrKey, `{"id":"alice"}`)
		m.Data = []byte("request")
		sender.sign(m)
		if edit != nil {
			edit(m)
		}
		return m
	}
	good := signed(nil)
	if err := receiver.verify(good); err != nil {
		t.Fatalf("a signed message: %v", err)
	}
	for what, tc := range map[string]struct {
		msg  *nats.Msg
		want error
	}{
		"the same message again": {good, errReplayed},
		"another subject":        {signed(func(m *nats.Msg) { m.Subject = "relay.node.n3.call" }), errBadSignature},
		"another caller":         {signed(func(m *nats.Msg) { m.Header.Set(hdrKey, `{"id":"admin"}`) }), errBadSignature},
		"an added header":        {signed(func(m *nats.Msg) { m.Header.Set(hdrMetadata, "{}") }), errBadSignature},
		"other data":             {signed(func(m *nats.Msg) { m.Data = []byte("requesT") }), errBadSignature},
		"no signature":           {signed(func(m *nats.Msg) { m.Header.Del(hdrSignature) }), errUnsigned},
	} {
		if err := receiver.verify(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", what, err, tc.want)
		}
	}
	other := newSigner(strings.Repeat("t", 32))
	m := nats.NewMsg("relay.node.n2.call")
	other.sign(m)
	if err := receiver.verify(m); !errors.Is(err, errBadSignature) {
		t.Errorf("signed with another secret: %v", err)
	}
	for _, skew := range []time.Duration{-signatureWindow - time.Second, signatureWindow + time.Second} {
		sender.now = func() time.Time { return now.Add(skew) }
		if err := receiver.verify(signed(nil)); !errors.Is(err, errStale) {
			t.Errorf("signed %v away: %v", skew, err)
		}
	}
	sender.now = clock
	// Nonces expire with the window, and no more than maxNonces are kept.
	now = now.Add(2 * signatureWindow)
	if err := receiver.verify(signed(nil)); err != nil {
		t.Fatal(err)
	}
	if n := len(receiver.nonces); n != 1 {
		t.Fatalf("%d nonces remembered after the window, want 1", n)
	}
	for i := len(receiver.nonces); i < maxNonces; i++ {
		if err := receiver.remember(strconv.Itoa(i)+"-filler", now.Add(time.Minute), now); err != nil {
			t.Fatal(err)
		}
	}
	if err := receiver.verify(signed(nil)); !errors.Is(err, errTooManyNonces) {
		t.Fatalf("past the bound: %v", err)
	}
	now = now.Add(2 * time.Minute)
	if err := receiver.verify(signed(nil)); err != nil || len(receiver.nonces) != 1 {
		t.Fatalf("after the fillers expired: %v, %d nonces", err, len(receiver.nonces))
	}
	// Without a secret nothing is signed or checked.
	none := newSigner("")
	plain := nats.NewMsg("x")
	none.sign(plain)
	if plain.Header.Get(hdrSignature) != "" || none.verify(plain) != nil {
		t.Fatal("a signer without a secret signed or refused")
	}
}

// TestRecordSignatureBindsItsPlace: a record's signature holds for its
// world, its place in the log and its bytes only, and is checked any
// number of times (followers read a record whenever they catch up); a
// refusal is counted; without a secret nothing is signed or checked.
func TestRecordSignatureBindsItsPlace(t *testing.T) {
	s := newSigner(strings.Repeat("r", 32))
	rec := []byte("a group of writes")
	sig := s.signRecord("relay.world.west", 41, rec)
	for range 2 {
		if err := s.verifyRecord("relay.world.west", 41, rec, sig); err != nil {
			t.Fatalf("the record as signed: %v", err)
		}
	}
	for _, c := range []struct {
		what, subject string
		last          uint64
		data          []byte
		sig           string
		want          error
	}{
		{"at another place", "relay.world.west", 42, rec, sig, errBadSignature},
		{"in another world", "relay.world.east", 41, rec, sig, errBadSignature},
		{"changed", "relay.world.west", 41, []byte("a group of writes!"), sig, errBadSignature},
		{"unsigned", "relay.world.west", 41, rec, "", errUnsigned},
		{"with a signature of the call key", "relay.world.west", 41, rec, newSigner(strings.Repeat("x", 32)).signRecord("relay.world.west", 41, rec), errBadSignature},
		{"with a signature that is not hex", "relay.world.west", 41, rec, "zz", errBadSignature},
	} {
		if err := s.verifyRecord(c.subject, c.last, c.data, c.sig); !errors.Is(err, c.want) {
			t.Errorf("a record %s: %v, want %v", c.what, err, c.want)
		}
	}
	if got := s.refused[refusedRecord].Load(); got != 6 {
		t.Errorf("%d refusals counted, want 6", got)
	}
	open := newSigner("")
	if sig := open.signRecord("relay.world.west", 41, rec); sig != "" {
		t.Errorf("signed without a secret: %q", sig)
	}
	if err := open.verifyRecord("relay.world.west", 41, rec, ""); err != nil {
		t.Errorf("checked without a secret: %v", err)
	}
}

// BenchmarkRecordSignature signs and checks a record of 4 KiB, as a host
// and a follower do for each group of writes.
func BenchmarkRecordSignature(b *testing.B) {
	s := newSigner(strings.Repeat("r", 32))
	rec := make([]byte, 4<<10)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		sig := s.signRecord("relay.world.west", 41, rec)
		if s.verifyRecord("relay.world.west", 41, rec, sig) != nil {
			b.Fatal("refused")
		}
	}
}
