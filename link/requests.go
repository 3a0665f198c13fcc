package link

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Key requests and pair requests are device flows that need no API key to
// start: a tool (key request) or the tabletop module (pair request) asks,
// gets a short code and a link to the console's approval page, and polls
// the request's status; a game master signed in with an admin API key
// approves or denies it there. Approving a key request creates the key
// through the relay's key administration acting as the approving key, and
// approving a pair request issues a pairing code the same way, so that
// neither can ever grant more than the approver holds.

// RequestKind tells key requests from pair requests: a code of one kind
// is unknown to the endpoints of the other.
type RequestKind string

// The kinds of request.
const (
	KindKeyRequest  RequestKind = "key"
	KindPairRequest RequestKind = "pair"
)

// The states of a request as the status endpoints name them. A request is
// expired when it is pending or approved (not yet delivered) past its
// expiry; that state is derived, never stored.
const (
	StatusPending   = "pending"
	StatusApproved  = "approved"
	StatusDenied    = "denied"
	StatusExchanged = "exchanged"
	StatusExpired   = "expired"
)

// RequestTTL is how long a request waits for its approval; once approved,
// the asker has as long again to fetch what it was granted.
const RequestTTL = CodeTTL

// requestRetention is how long after its expiry a request is remembered,
// so that the asker polling late learns it expired (410) rather than that
// it never existed (404).
const requestRetention = RequestTTL

// Request is a key request or a pair request as the store keeps it. Its
// code is not kept, only its hash (the store's key).
type Request struct {
	Kind      RequestKind `json:"kind"`
	Status    string      `json:"status"`
	CreatedAt time.Time   `json:"createdAt"`
	ExpiresAt time.Time   `json:"expiresAt"`

	// What a key request asks for.
	AppName        string   `json:"appName,omitempty"`
	AppDescription string   `json:"appDescription,omitempty"`
	AppURL         string   `json:"appUrl,omitempty"`
	CallbackURL    string   `json:"callbackUrl,omitempty"`
	Scopes         []string `json:"scopes,omitempty"`
	ClientIDs      []string `json:"clientIds,omitempty"`

	// What a pair request says of the world.
	WorldID           string `json:"worldId,omitempty"`
	WorldTitle        string `json:"worldTitle,omitempty"`
	SystemID          string `json:"systemId,omitempty"`
	SystemTitle       string `json:"systemTitle,omitempty"`
	SystemVersion     string `json:"systemVersion,omitempty"`
	FoundryVersion    string `json:"foundryVersion,omitempty"`
	ServerFingerprint string `json:"serverFingerprint,omitempty"`

	// The outcome. ApprovedBy is the id of the key that approved or
	// denied, ApprovedAccount its account; KeyID the id of the key an approved key request made.
	ApprovedBy      string   `json:"approvedBy,omitempty"`
	ApprovedAccount string   `json:"approvedAccount,omitempty"`
	KeyID           string   `json:"keyId,omitempty"`
	GrantedScopes   []string `json:"grantedScopes,omitempty"`
	GrantedClients  []string `json:"grantedClientIds,omitempty"`
	// Secret is what the asker fetches once: the API key of a key request
	// or the pairing code of a pair request. It is kept only between the
	// approval and its delivery (or the request's end), and erased then.
	Secret string `json:"secret,omitempty"`
	// ExchangeHash is the hex SHA-256 of the exchange code of a key
	// request with a callbackUrl (the web flow).
	ExchangeHash string `json:"exchangeHash,omitempty"`
}

// StatusAt is the request's state at now: its stored status, or expired
// when it was not delivered in time.
func (r Request) StatusAt(now time.Time) string {
	if (r.Status == StatusPending || r.Status == StatusApproved) && !now.Before(r.ExpiresAt) {
		return StatusExpired
	}
	return r.Status
}

// ErrUnknownRequest is the store's answer for a code it does not know.
var ErrUnknownRequest = errors.New("request not found")

// ErrRequestChanged is the store's answer to an update of a request that
// changed since it was read: the caller reads it again.
var ErrRequestChanged = errors.New("request changed meanwhile")

// ErrRequestsFull is the store's answer when it holds as many requests as
// it may: the caller tries again later (503).
var ErrRequestsFull = errors.New("too many open requests")

// RequestStore keeps key requests and pair requests by the hash of their
// code. Each method is one atomic step, so that a store shared by several
// relays (a key-value store with compare-and-set) implements it: a node
// alone keeps them in memory ([MemoryRequests]), a cluster in JetStream
// (package cluster/shared).
type RequestStore interface {
	// SaveRequest stores a new request; a hash already used fails.
	SaveRequest(ctx context.Context, h Hash, r Request) error
	// Request returns the request and a revision for UpdateRequest, or
	// ErrUnknownRequest.
	Request(ctx context.Context, h Hash) (Request, uint64, error)
	// UpdateRequest replaces the request if its revision is still rev,
	// else fails with ErrRequestChanged.
	UpdateRequest(ctx context.Context, h Hash, r Request, rev uint64) error
}

// DefaultMaxRequests bounds how many requests a MemoryRequests keeps.
const DefaultMaxRequests = 10000

// MemoryRequests is the RequestStore of a relay alone: requests live in
// memory (they last minutes, so a restart losing them costs a new
// request), at most max of them, each forgotten requestRetention after
// its expiry.
type MemoryRequests struct {
	now func() time.Time
	max int

	mu   sync.Mutex
	reqs map[Hash]memoryRequest
	rev  uint64
}

type memoryRequest struct {
	r   Request
	rev uint64
}

// NewMemoryRequests returns an empty store of at most max requests
// (DefaultMaxRequests when max <= 0) on the clock now (time.Now when nil).
func NewMemoryRequests(max int, now func() time.Time) *MemoryRequests {
	if max <= 0 {
		max = DefaultMaxRequests
	}
	if now == nil {
		now = time.Now
	}
	return &MemoryRequests{now: now, max: max, reqs: map[Hash]memoryRequest{}}
}

// SaveRequest implements RequestStore.
func (m *MemoryRequests) SaveRequest(_ context.Context, h Hash, r Request) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.reqs[h]; ok {
		return errors.New("link: request code already in use")
	}
	if len(m.reqs) >= m.max {
		m.sweep()
		if len(m.reqs) >= m.max {
			return ErrRequestsFull
		}
	}
	m.rev++
	m.reqs[h] = memoryRequest{r: r, rev: m.rev}
	return nil
}

// sweep forgets the requests past their retention; m.mu is held.
func (m *MemoryRequests) sweep() {
	now := m.now()
	for h, e := range m.reqs {
		if !now.Before(e.r.ExpiresAt.Add(requestRetention)) {
			delete(m.reqs, h)
		}
	}
}

// Request implements RequestStore.
func (m *MemoryRequests) Request(_ context.Context, h Hash) (Request, uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.reqs[h]
	if !ok || !m.now().Before(e.r.ExpiresAt.Add(requestRetention)) {
		return Request{}, 0, ErrUnknownRequest
	}
	return e.r, e.rev, nil
}

// UpdateRequest implements RequestStore.
func (m *MemoryRequests) UpdateRequest(_ context.Context, h Hash, r Request, rev uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.reqs[h]
	if !ok {
		return ErrUnknownRequest
	}
	if e.rev != rev {
		return ErrRequestChanged
	}
	m.rev++
	m.reqs[h] = memoryRequest{r: r, rev: m.rev}
	return nil
}

// newRequest stores a new request under a fresh code and returns the code.
func newRequest(ctx context.Context, store RequestStore, r Request) (string, error) {
	for range 4 {
		code, err := drawCode()
		if err != nil {
			return "", err
		}
		// A code in use (live or remembered) is drawn again.
		if _, _, err := store.Request(ctx, hashOf(code)); err == nil {
			continue
		} else if !errors.Is(err, ErrUnknownRequest) {
			return "", err
		}
		if err := store.SaveRequest(ctx, hashOf(code), r); err != nil {
			return "", err
		}
		return code, nil
	}
	return "", errors.New("link: could not draw an unused request code")
}

// updateRequest reads the request of kind with the given code, lets
// change decide its new state, and writes it with compare-and-set,
// reading again when another caller changed it meanwhile. change returns
// the request to write, or an error that ends the update.
func updateRequest(ctx context.Context, store RequestStore, kind RequestKind, code string, change func(Request) (Request, error)) (Request, error) {
	h := hashOf(code)
	for range 8 {
		r, rev, err := store.Request(ctx, h)
		if err != nil {
			return Request{}, err
		}
		if r.Kind != kind {
			return Request{}, ErrUnknownRequest
		}
		next, err := change(r)
		if err != nil {
			return r, err
		}
		err = store.UpdateRequest(ctx, h, next, rev)
		if errors.Is(err, ErrRequestChanged) {
			continue
		}
		return next, err
	}
	return Request{}, fmt.Errorf("link: the request kept changing: %w", ErrRequestChanged)
}

// exchangeSecretBytes is the size of the random part of an exchange code.
const exchangeSecretBytes = 24

// newExchangeCode draws the exchange code of a web-flow key request: the
// request's code, a dot and a random secret, of which only the hash is
// kept. The code part finds the request; the secret proves the holder got
// it from the approval's redirect.
func newExchangeCode(code string) (exchange, hash string, err error) {
	var b [exchangeSecretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", fmt.Errorf("link: generate exchange code: %w", err)
	}
	secret := hex.EncodeToString(b[:])
	h := hashOf(secret)
	return code + "." + secret, hex.EncodeToString(h[:]), nil
}

// exchangeMatches reports whether secret is the one whose hash the request
// keeps, in constant time.
func exchangeMatches(r Request, secret string) bool {
	if r.ExchangeHash == "" || len(secret) != 2*exchangeSecretBytes {
		return false
	}
	h := hashOf(secret)
	return subtle.ConstantTimeCompare([]byte(hex.EncodeToString(h[:])), []byte(r.ExchangeHash)) == 1
}
