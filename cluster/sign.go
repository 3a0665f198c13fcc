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
	signingInfo       = "relay cluster call signature v2"
	recordSigningInfo = "relay cluster world record signature v1"
	answerSigningInfo = "relay cluster answer signature v1"
)

// errSignature is why a message's signature is refused.
var (
	errUnsigned      = errors.New("the message is not signed")
	errBadSignature  = errors.New("the message's signature is wrong")
	errStale         = errors.New("the message's signature is too old, or from the future")
	errReplayed      = errors.New("the message was already received")
	errTooManyNonces = errors.New("too many signed messages at once")
	errOutOfOrder    = errors.New("the message was already received, or came out of its order")
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
	// answers holds HMAC states keyed for answers and the messages of
	// transfers (see signAnswer), for the same reason: a download pays one
	// HMAC per message.
	answers sync.Pool
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
	answerKey, err := hkdf.Key(sha256.New, []byte(secret), nil, answerSigningInfo, sha256.Size)
	if err != nil {
		panic("cluster: derive the answer signing key: " + err.Error())
	}
	s.answers.New = func() any { return &answerState{mac: hmac.New(sha256.New, answerKey)} }
	return s
}

// The kinds of message whose refusals are counted.
const (
	refusedRecord = iota // a record of a world's log
	refusedPing          // a liveness ping
	refusedCall          // a forwarded call, stream, upload or question
	refusedAnswer        // an answer to one, or a message of a transfer
	refusedKinds
)

// Refused counts the messages refused because they carried no valid
// cluster signature: records of the worlds' logs that followers skipped,
// liveness pings, and calls between nodes (see RefusedAnswers for what
// comes back).
func (n *Node) Refused() (records, pings, calls int64) {
	s := n.signer
	return s.refused[refusedRecord].Load(), s.refused[refusedPing].Load(), s.refused[refusedCall].Load()
}

// RefusedAnswers counts the messages a node dropped because they were
// not a valid signed answer of another node: answers to forwarded calls,
// questions and pings, and the messages and acknowledgements of forwarded
// downloads and uploads, forged, replayed or out of their order.
func (n *Node) RefusedAnswers() int64 { return n.signer.refused[refusedAnswer].Load() }

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

// mac is the HMAC of msg: its subject, the subject its answer goes to,
// every header but the signature (sorted by name, each value in order),
// and its data, each with its length before it, so that no two messages
// share an encoding. Covering the answer's subject keeps a client that
// sees a call go by from sending it again, before the node that signed
// it, with an answer subject of its own.
func (s *signer) mac(msg *nats.Msg) []byte {
	m := hmac.New(sha256.New, s.key)
	field := func(h hash.Hash, b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(m, []byte(msg.Subject))
	field(m, []byte(msg.Reply))
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

// Answers between nodes, and the messages of transfers.
//
// A node takes the answer to a call, a question or a ping on an inbox of
// its own, one per request, and the messages of a forwarded download or
// upload (and their acknowledgements) on an inbox of the transfer's own.
// A client of the NATS account may publish there too, as soon as it sees
// the subject go by. With a cluster secret, each such message carries an
// HMAC-SHA256 over its subject, its place in the exchange (hdrSeq: 0 for
// the one answer to a request, 1, 2, ... for the messages of a transfer,
// in the order they are sent), its headers and its data, with a key of
// its own derived from the secret. The subject is new for every request
// and every transfer, and the receiver takes each place once and in
// order, so a message copied from another exchange, or again into its
// own, is refused without a table of nonces; no timestamp is needed
// either, since an exchange lives no longer than its subject. A refused
// message is dropped and counted, and the receiver goes on waiting for
// the sender's own.

// hdrSeq is a message's place in its exchange.
const hdrSeq = "Relay-Seq"

// signAnswer signs msg, whose subject, headers and data must be final, as
// the message at place seq of its exchange (0: the answer to a request).
func (s *signer) signAnswer(msg *nats.Msg, seq uint64) {
	if !s.enabled() {
		return
	}
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	if seq != 0 {
		msg.Header[hdrSeq] = []string{strconv.FormatUint(seq, 10)}
	}
	var sum [sha256.Size]byte
	s.answerMAC(msg, seq, &sum)
	msg.Header[hdrSignature] = []string{hex.EncodeToString(sum[:])}
}

// verifyAnswer checks that msg is the answer to a request, signed by a
// node for the subject it came on, and counts a refusal.
func (s *signer) verifyAnswer(msg *nats.Msg) error {
	if !s.enabled() {
		return nil
	}
	return s.counted(s.checkAnswer(msg, nil, false))
}

// verifyNext checks that msg is the next message of its transfer, after
// place *last, and moves *last on; a message of a place already taken is
// refused. With gaps, a message may skip places (acknowledgements, which
// only ever say more); without, a skipped place means that a message of
// the sender's was lost, an error of its own (errOutOfOrder) that the
// transfer cannot recover from. A refusal is counted.
func (s *signer) verifyNext(msg *nats.Msg, last *uint64, gaps bool) error {
	if !s.enabled() {
		return nil
	}
	return s.counted(s.checkAnswer(msg, last, gaps))
}

// counted counts err, when there is one, as a refused answer.
func (s *signer) counted(err error) error {
	if err != nil {
		s.refused[refusedAnswer].Add(1)
	}
	return err
}

// checkAnswer checks msg's signature for its subject and place: the one
// answer to a request (place 0) when last is nil, else the next message
// of a transfer after place *last.
func (s *signer) checkAnswer(msg *nats.Msg, last *uint64, gaps bool) error {
	sig := msg.Header.Get(hdrSignature)
	if sig == "" {
		return errUnsigned
	}
	var seq uint64
	if v := msg.Header.Get(hdrSeq); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return errBadSignature
		}
		seq = n
	}
	if (last == nil) != (seq == 0) {
		return errBadSignature
	}
	var want [sha256.Size]byte
	var wantHex [2 * sha256.Size]byte
	if len(sig) != len(wantHex) {
		return errBadSignature
	}
	s.answerMAC(msg, seq, &want)
	hex.Encode(wantHex[:], want[:])
	// Compared in constant time, as hmac.Equal does, without copying the
	// header into bytes.
	var diff byte
	for i := range wantHex {
		diff |= wantHex[i] ^ sig[i]
	}
	if diff != 0 {
		return errBadSignature
	}
	switch {
	case last == nil:
		return nil
	case seq <= *last:
		return errReplayed
	case seq != *last+1 && !gaps:
		return errOutOfOrder
	}
	*last = seq
	return nil
}

// answerState is an HMAC state keyed for answers, with the scratch room
// its use needs, so that signing or checking a message costs no
// allocation of its own.
type answerState struct {
	mac     hash.Hash
	scratch []byte
	names   [8]string
	sum     [sha256.Size]byte
}

// field writes b, with its length before it.
func (st *answerState) field(b []byte) {
	st.scratch = binary.BigEndian.AppendUint64(st.scratch[:0], uint64(len(b)))
	st.mac.Write(st.scratch)
	st.mac.Write(b)
}

// fieldString writes v, with its length before it.
func (st *answerState) fieldString(v string) {
	st.scratch = binary.BigEndian.AppendUint64(st.scratch[:0], uint64(len(v)))
	st.scratch = append(st.scratch, v...)
	st.mac.Write(st.scratch)
}

// answerMAC writes into sum the HMAC of an answer or a transfer's message:
// its subject, its place, its headers but the signature and the place
// (sorted by name, each value in order) and its data, each with its
// length before it.
func (s *signer) answerMAC(msg *nats.Msg, seq uint64, sum *[sha256.Size]byte) {
	st := s.answers.Get().(*answerState)
	defer s.answers.Put(st)
	st.mac.Reset()
	st.fieldString(msg.Subject)
	st.scratch = binary.BigEndian.AppendUint64(st.scratch[:0], seq)
	st.mac.Write(st.scratch)
	// The messages of a transfer carry two or three headers: the names
	// fit the state's room.
	names := st.names[:0]
	for name := range msg.Header {
		if name != hdrSignature && name != hdrSeq {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		st.fieldString(name)
		values := msg.Header[name]
		st.scratch = binary.BigEndian.AppendUint64(st.scratch[:0], uint64(len(values)))
		st.mac.Write(st.scratch)
		for _, v := range values {
			st.fieldString(v)
		}
	}
	clear(st.names[:])
	st.field(msg.Data)
	*sum = [sha256.Size]byte(st.mac.Sum(st.sum[:0]))
}
