package cluster

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Signed calls between nodes.
//
// A node acts for the caller a message names: a forwarded call carries
// the caller's resolved key, a question about a world's users names the
// world. Whoever can publish on the nodes' subjects could therefore make a
// node act for anyone; the NATS server's own locks (the embedded server's
// token and route secret, or an account of the relays' own with --nats)
// are the first guard, and signatures the second. With a cluster secret,
// every such message carries an HMAC-SHA256 over its subject, its headers
// and its data, a timestamp and a random nonce, with a key derived from
// the secret (HKDF-SHA256, so the route password itself never signs
// anything). The receiving node refuses a message without a valid
// signature, one whose timestamp is further than signatureWindow from its
// own clock, and one whose nonce it has already seen within that window.
// Without a secret (a cluster on loopback, or --cluster-insecure),
// messages are neither signed nor checked.

// Headers of a signed message.
const (
	hdrSignature = "Relay-Signature"
	hdrSignedAt  = "Relay-Signed-At"
	hdrNonce     = "Relay-Nonce"
)

// signatureWindow is how far a signed message's timestamp may be from the
// receiver's clock, either way: room for the nodes' clocks to differ and
// for a message to wait in a loaded node's queues.
const signatureWindow = 30 * time.Second

// maxNonces bounds the nonces a node remembers: the messages it may
// accept within twice signatureWindow. Past it, new messages are refused
// until old nonces expire, so a flood costs bounded memory; at 1,000
// forwarded calls a second, a node remembers 60,000.
const maxNonces = 1 << 18

// signingInfo binds the derived key to its use, and recordSigningInfo
// the key that signs the records of the worlds' logs to theirs.
const (
	signingInfo       = "relay cluster call signature v1"
	recordSigningInfo = "relay cluster world record signature v1"
)

// errSignature is why a message's signature is refused.
var (
	errUnsigned      = errors.New("the message is not signed")
	errBadSignature  = errors.New("the message's signature is wrong")
	errStale         = errors.New("the message's signature is too old, or from the future")
	errReplayed      = errors.New("the message was already received")
	errTooManyNonces = errors.New("too many signed messages at once")
)

// signer signs the messages a node sends and checks those it receives.
// Its zero value, without a key, signs and checks nothing.
type signer struct {
	key []byte
	now func() time.Time

	// records holds HMAC states keyed for the worlds' log records, reset
	// and used again: a record is signed by its host and checked by each
	// follower, at every write, so the key schedule is not worked out
	// again each time.
	records sync.Pool
	// refused counts the messages refused for their signature, by kind.
	refused [refusedKinds]atomic.Int64

	mu     sync.Mutex
	nonces map[string]time.Time // nonce → when it may be forgotten
	order  []seenNonce          // nonces in arrival order, for expiry
}

type seenNonce struct {
	nonce   string
	expires time.Time
}

// newSigner derives the signing key from the cluster secret; without a
// secret it returns a signer that signs and checks nothing.
func newSigner(secret string) *signer {
	s := &signer{now: time.Now, nonces: map[string]time.Time{}}
	if secret == "" {
		return s
	}
	key, err := hkdf.Key(sha256.New, []byte(secret), nil, signingInfo, sha256.Size)
	if err != nil {
		// HKDF fails only for a key longer than 255 hashes: not this one.
		panic("cluster: derive the signing key: " + err.Error())
	}
	s.key = key
	recordKey, err := hkdf.Key(sha256.New, []byte(secret), nil, recordSigningInfo, sha256.Size)
	if err != nil {
		panic("cluster: derive the record signing key: " + err.Error())
	}
	s.records.New = func() any { return hmac.New(sha256.New, recordKey) }
	return s
}

// The kinds of message whose refusals are counted.
const (
	refusedRecord = iota // a record of a world's log
	refusedPing          // a liveness ping, or its answer
	refusedCall          // a forwarded call, stream, upload or question
	refusedKinds
)

// Refused counts the messages refused because they carried no valid
// cluster signature: records of the worlds' logs that followers skipped,
// liveness pings (and answers to them), and calls between nodes.
func (n *Node) Refused() (records, pings, calls int64) {
	s := n.signer
	return s.refused[refusedRecord].Load(), s.refused[refusedPing].Load(), s.refused[refusedCall].Load()
}

// Records of the worlds' logs.
//
// A follower applies what the world's stream holds, and a client of the
// NATS account could publish on the stream's subject too. With a cluster
// secret, the host signs each record with an HMAC-SHA256 over the world's
// subject, the sequence the record must follow (the expected last
// sequence it is appended with) and its bytes, with a key of its own
// derived from the secret; a follower skips a record whose signature is
// missing or wrong, and counts it. The signature binds the record to its
// place in the log: a signed record copied elsewhere in the log is
// refused. It carries no timestamp or nonce: a follower may read a
// record long after it was written.

// signRecord returns the signature of a record appended after sequence
// last on subject ("" without a secret).
func (s *signer) signRecord(subject string, last uint64, data []byte) string {
	if !s.enabled() {
		return ""
	}
	return hex.EncodeToString(s.recordMAC(subject, last, data))
}

// verifyRecord checks the signature of the record at sequence last+1 of
// subject, and counts a refusal.
func (s *signer) verifyRecord(subject string, last uint64, data []byte, sig string) error {
	if !s.enabled() {
		return nil
	}
	err := errUnsigned
	if sig != "" {
		err = errBadSignature
		var got [sha256.Size]byte
		if n, derr := hex.Decode(got[:], []byte(sig)); derr == nil && n == len(got) && hmac.Equal(got[:], s.recordMAC(subject, last, data)) {
			err = nil
		}
	}
	if err != nil {
		s.refused[refusedRecord].Add(1)
	}
	return err
}

// recordMAC is the HMAC of a record: its subject and the sequence it
// follows, each with its length before it, then its bytes.
func (s *signer) recordMAC(subject string, last uint64, data []byte) []byte {
	m := s.records.Get().(hash.Hash)
	defer s.records.Put(m)
	m.Reset()
	var head [8]byte
	binary.BigEndian.PutUint64(head[:], uint64(len(subject)))
	m.Write(head[:])
	m.Write([]byte(subject))
	binary.BigEndian.PutUint64(head[:], last)
	m.Write(head[:])
	m.Write(data)
	return m.Sum(make([]byte, 0, sha256.Size))
}

// enabled reports whether messages are signed and checked.
func (s *signer) enabled() bool { return s != nil && s.key != nil }

// sign adds a timestamp, a nonce and the signature to msg, whose subject,
// headers and data must be final.
func (s *signer) sign(msg *nats.Msg) {
	if !s.enabled() {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header.Del(hdrSignature)
	msg.Header.Set(hdrSignedAt, strconv.FormatInt(s.now().UnixNano(), 10))
	msg.Header.Set(hdrNonce, rand.Text())
	msg.Header.Set(hdrSignature, hex.EncodeToString(s.mac(msg)))
}

// verify checks msg's signature, its timestamp and its nonce, and
// remembers the nonce. A message that passes can be acted on once.
func (s *signer) verify(msg *nats.Msg) error {
	if !s.enabled() {
		return nil
	}
	sig := msg.Header.Get(hdrSignature)
	if sig == "" {
		return errUnsigned
	}
	got, err := hex.DecodeString(sig)
	if err != nil || !hmac.Equal(got, s.mac(msg)) {
		return errBadSignature
	}
	at, err := strconv.ParseInt(msg.Header.Get(hdrSignedAt), 10, 64)
	if err != nil {
		return errBadSignature
	}
	now := s.now()
	signed := time.Unix(0, at)
	if signed.Before(now.Add(-signatureWindow)) || signed.After(now.Add(signatureWindow)) {
		return errStale
	}
	return s.remember(msg.Header.Get(hdrNonce), signed.Add(signatureWindow), now)
}

// remember records a nonce until it expires, and refuses one already
// recorded. A nonce expires when its message's timestamp leaves the
// window: after that the message is refused as stale anyway.
func (s *signer) remember(nonce string, expires, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Forget the expired nonces first. Messages arrive roughly in the
	// order of their timestamps, so the expired are mostly at the front;
	// one that expires later than those behind it only holds them a
	// little longer, and never lets one go early.
	n := 0
	for n < len(s.order) && !s.order[n].expires.After(now) {
		delete(s.nonces, s.order[n].nonce)
		n++
	}
	if n > 0 {
		s.order = slices.Delete(s.order, 0, n)
	}
	if _, seen := s.nonces[nonce]; seen {
		return errReplayed
	}
	if len(s.nonces) >= maxNonces {
		return errTooManyNonces
	}
	s.nonces[nonce] = expires
	s.order = append(s.order, seenNonce{nonce: nonce, expires: expires})
	return nil
}

// mac is the HMAC of msg: its subject, every header but the signature
// (sorted by name, each value in order), and its data, each with its
// length before it, so that no two messages share an encoding.
func (s *signer) mac(msg *nats.Msg) []byte {
	m := hmac.New(sha256.New, s.key)
	field := func(h hash.Hash, b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(m, []byte(msg.Subject))
	names := make([]string, 0, len(msg.Header))
	for name := range msg.Header {
		if name != hdrSignature {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		field(m, []byte(name))
		values := msg.Header[name]
		field(m, binary.BigEndian.AppendUint64(nil, uint64(len(values))))
		for _, v := range values {
			field(m, []byte(v))
		}
	}
	field(m, msg.Data)
	return m.Sum(nil)
}
