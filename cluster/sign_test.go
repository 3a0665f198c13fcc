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

// TestAnswerSignatureBindsItsExchange: an answer's signature holds for its
// subject only, as the one answer to a request; a transfer's messages are
// taken once each and in their order, acknowledgements may skip places,
// and a lost message is an error of its own; refusals are counted; a call
// signed for one answer subject is refused with another; without a secret
// nothing is signed or checked.
func TestAnswerSignatureBindsItsExchange(t *testing.T) {
	secret := strings.Repeat("a", 32)
	host, edge := newSigner(secret), newSigner(secret)
	answer := func(subject string, edit func(*nats.Msg)) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Header.Set(hdrStatus, "c3RhdHVz")
		m.Data = []byte("response")
		host.signAnswer(m, 0)
		if edit != nil {
			edit(m)
		}
		return m
	}
	if err := edge.verifyAnswer(answer("_INBOX.a.1", nil)); err != nil {
		t.Fatalf("an answer as signed: %v", err)
	}
	part := func(subject string, seq uint64, data string) *nats.Msg {
		m := nats.NewMsg(subject)
		m.Data = []byte(data)
		host.signAnswer(m, seq)
		return m
	}
	for what, tc := range map[string]struct {
		msg  *nats.Msg
		want error
	}{
		"for another request":  {answer("_INBOX.a.1", func(m *nats.Msg) { m.Subject = "_INBOX.a.2" }), errBadSignature},
		"with other data":      {answer("_INBOX.a.1", func(m *nats.Msg) { m.Data = []byte("forged") }), errBadSignature},
		"with another status":  {answer("_INBOX.a.1", func(m *nats.Msg) { m.Header.Set(hdrStatus, "Zm9yZ2Vk") }), errBadSignature},
		"with an added header": {answer("_INBOX.a.1", func(m *nats.Msg) { m.Header.Set(hdrHeader, "{}") }), errBadSignature},
		"without a signature":  {answer("_INBOX.a.1", func(m *nats.Msg) { m.Header.Del(hdrSignature) }), errUnsigned},
		"with a place":         {answer("_INBOX.a.1", func(m *nats.Msg) { m.Header.Set(hdrSeq, "1") }), errBadSignature},
		"a transfer's message": {part("_INBOX.a.1", 1, "response"), errBadSignature},
		"signed by another key": {func() *nats.Msg {
			m := nats.NewMsg("_INBOX.a.1")
			newSigner(strings.Repeat("b", 32)).signAnswer(m, 0)
			return m
		}(), errBadSignature},
	} {
		if err := edge.verifyAnswer(tc.msg); !errors.Is(err, tc.want) {
			t.Errorf("an answer %s: %v, want %v", what, err, tc.want)
		}
	}
	if got := edge.refused[refusedAnswer].Load(); got != 8 {
		t.Errorf("%d refused answers counted, want 8", got)
	}

	// A transfer: its messages in order, once each.
	var last uint64
	first, second := part("_INBOX.t", 1, "one"), part("_INBOX.t", 2, "two")
	if err := edge.verifyNext(first, &last, false); err != nil {
		t.Fatalf("the first message: %v", err)
	}
	for what, tc := range map[string]struct {
		msg  *nats.Msg
		want error
	}{
		"again":                          {first, errReplayed},
		"of another transfer":            {func() *nats.Msg { m := part("_INBOX.u", 2, "two"); m.Subject = "_INBOX.t"; return m }(), errBadSignature},
		"moved to another place":         {func() *nats.Msg { m := part("_INBOX.t", 2, "two"); m.Header.Set(hdrSeq, "3"); return m }(), errBadSignature},
		"as the answer to a request":     {answer("_INBOX.t", nil), errBadSignature},
		"with a place that is no number": {func() *nats.Msg { m := part("_INBOX.t", 2, "two"); m.Header.Set(hdrSeq, "two"); return m }(), errBadSignature},
	} {
		if err := edge.verifyNext(tc.msg, &last, false); !errors.Is(err, tc.want) || last != 1 {
			t.Errorf("a message %s: %v (at %d), want %v", what, err, last, tc.want)
		}
	}
	if err := edge.verifyNext(second, &last, false); err != nil || last != 2 {
		t.Fatalf("the second message: %v (at %d)", err, last)
	}
	if err := edge.verifyNext(part("_INBOX.t", 4, "four"), &last, false); !errors.Is(err, errOutOfOrder) {
		t.Fatalf("a message after a lost one: %v", err)
	}
	// Acknowledgements may skip places, never go back.
	var acked uint64
	if err := host.verifyNext(part("_INBOX.acks", 3, "24"), &acked, true); err != nil || acked != 3 {
		t.Fatalf("an acknowledgement after a skip: %v (at %d)", err, acked)
	}
	if err := host.verifyNext(part("_INBOX.acks", 2, "16"), &acked, true); !errors.Is(err, errReplayed) {
		t.Fatalf("an older acknowledgement: %v", err)
	}

	// A call signed for one answer subject is refused with another.
	call := nats.NewMsg("relay.node.n2.call")
	call.Reply = "_INBOX.a.3"
	edge.sign(call)
	call.Reply = "_INBOX.rogue"
	if err := host.verify(call); !errors.Is(err, errBadSignature) {
		t.Fatalf("a call with another answer subject: %v", err)
	}

	// Without a secret nothing is signed or checked.
	none := newSigner("")
	plain := nats.NewMsg("_INBOX.a.1")
	none.signAnswer(plain, 3)
	if len(plain.Header) != 0 || none.verifyAnswer(plain) != nil || none.verifyNext(plain, &last, false) != nil {
		t.Fatal("a signer without a secret signed or refused")
	}
}

// BenchmarkTransferMessage signs and checks a message of a forwarded
// download (a chunk of 256 KiB) and an event-sized one (512 bytes), as a
// host and an edge do for each. Figures taken on a loaded machine compare
// only with each other.
func BenchmarkTransferMessage(b *testing.B) {
	for _, size := range []int{512, 256 << 10} {
		b.Run(strconv.Itoa(size), func(b *testing.B) {
			host, edge := newSigner(strings.Repeat("a", 32)), newSigner(strings.Repeat("a", 32))
			data := make([]byte, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			var last uint64
			for b.Loop() {
				m := nats.NewMsg("_INBOX.0123456789abcdefghijkl")
				m.Data = data
				host.signAnswer(m, last+1)
				if edge.verifyNext(m, &last, false) != nil {
					b.Fatal("refused")
				}
			}
		})
	}
}
