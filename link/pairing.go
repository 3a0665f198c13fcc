package link

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Pairing codes: CodeLength characters from CodeAlphabet, which leaves out
// the characters people confuse (0 and O, 1, I and L), valid for CodeTTL
// and for one pairing. 31⁶ is about 887 million codes; with pairing
// attempts limited per address, guessing a live code is hopeless.
const (
	CodeLength   = 6
	CodeAlphabet = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
	CodeTTL      = 10 * time.Minute
)

// Connection tokens: "rlt_" and the unpadded base64url of 32 random bytes.
const (
	tokenPrefix = "rlt_"
	tokenBytes  = 32
	tokenLen    = len(tokenPrefix) + 43 // base64.RawURLEncoding.EncodedLen(tokenBytes)
)

// linkedIDPrefix starts the clientId of every world paired with this relay
// (then 16 hex characters), as the module's other relay does.
const linkedIDPrefix = "fvtt_"

// Bounds of what the module sends at pairing, in bytes.
const (
	maxWorldIDBytes     = 256
	maxTitleBytes       = 512
	maxFingerprintBytes = 256
	maxOriginBytes      = 2048
)

// Pairings issues pairing codes, pairs worlds with them and checks
// connection tokens, over a [Store].
type Pairings struct {
	store Store
	now   func() time.Time
	// taken reports whether a clientId is already used by a world that is
	// not linked (an embedded one); nil when there are none.
	taken func(clientID string) bool

	// listMu guards listGen and list. list is the store's list of linked
	// worlds as last read, kept because every call that names no world
	// needs it (to find the only world) and reading it costs a SQL query;
	// every change to the records through these pairings drops it and
	// bumps listGen, so that a list read before the change is not kept.
	// The list is kept only when the store is this relay's own SQLite
	// database, written through these pairings only (the relay's CLI goes
	// through the running relay's API); a store shared by several relays
	// is read every time, since another relay may change it.
	keepList bool
	listMu   sync.Mutex
	listGen  uint64
	list     []World
	listOK   bool
}

// NewPairings returns pairings over store. now is the clock (time.Now when
// nil); taken, when not nil, reports clientIds that other kinds of world
// use, which a new linked world must not get.
func NewPairings(store Store, now func() time.Time, taken func(clientID string) bool) *Pairings {
	if now == nil {
		now = time.Now
	}
	_, own := store.(*SQLiteStore)
	return &Pairings{store: store, now: now, taken: taken, keepList: own}
}

// NewCode issues a pairing code and returns it with its record; the code
// itself is not stored and is shown only here. With a clientId, the code
// pairs only that linked world again (ErrUnknownWorld when there is none);
// without one, only a new world.
// createdBy is the id of the API key that asked, for the record.
func (p *Pairings) NewCode(ctx context.Context, clientID, createdBy string) (string, Code, error) {
	return p.NewCodeIn(ctx, "", clientID, createdBy)
}

// NewCodeIn issues a pairing code, as NewCode does, for the account
// account ("" for the operator's): the world it links belongs to that
// account. A code that pairs one world again is only for the account that
// owns it, or the operator's; for any other, the world is unknown
// (ErrUnknownWorld). The world stays in its account either way.
func (p *Pairings) NewCodeIn(ctx context.Context, account, clientID, createdBy string) (string, Code, error) {
	if clientID != "" {
		w, err := p.store.World(ctx, clientID)
		if err != nil {
			return "", Code{}, err
		}
		if account != "" && w.Account != account {
			return "", Code{}, unknownWorld(clientID)
		}
		account = w.Account
	}
	code, err := drawCode()
	if err != nil {
		return "", Code{}, err
	}
	now := p.now().UTC()
	c := Code{Hash: hashOf(code), ClientID: clientID, CreatedBy: createdBy, Account: account, CreatedAt: now, ExpiresAt: now.Add(CodeTTL)}
	if err := p.store.SaveCode(ctx, c); err != nil {
		return "", Code{}, err
	}
	return code, c, nil
}

// drawCode draws a code uniformly from the alphabet: random bytes at or
// above the largest multiple of its size are drawn again, so that no
// character is likelier than another.
func drawCode() (string, error) {
	limit := 256 - 256%len(CodeAlphabet)
	code := make([]byte, 0, CodeLength)
	var buf [16]byte
	for len(code) < CodeLength {
		if _, err := rand.Read(buf[:]); err != nil {
			return "", fmt.Errorf("link: generate pairing code: %w", err)
		}
		for _, v := range buf {
			if int(v) < limit && len(code) < CodeLength {
				code = append(code, CodeAlphabet[int(v)%len(CodeAlphabet)])
			}
		}
	}
	return string(code), nil
}

// normaliseCode puts a typed code in its canonical form: capitals, without
// spaces or dashes (people type codes as "ABC DEF" or "abc-def"). It
// reports false when the result cannot be a code.
func normaliseCode(s string) (string, bool) {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == ' ' || r == '-':
			continue
		case 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		}
		if !strings.ContainsRune(CodeAlphabet, r) {
			return "", false
		}
		b.WriteRune(r)
		if b.Len() > CodeLength {
			return "", false
		}
	}
	return b.String(), b.Len() == CodeLength
}

// PairRequest is the body the module posts to `/auth/pair`.
type PairRequest struct {
	// Code is the pairing code the game master typed.
	Code string `json:"code"`
	// WorldID and WorldTitle are the tabletop's id and title of the world.
	WorldID    string `json:"worldId"`
	WorldTitle string `json:"worldTitle"`
	// ServerFingerprint is the random id the module keeps in the world's
	// settings.
	ServerFingerprint string `json:"serverFingerprint"`
	// ExistingClientID is the clientId the world had, if any.
	ExistingClientID string `json:"existingClientId"`
	// ServerOrigin is the tabletop's public address.
	ServerOrigin string `json:"serverOrigin"`
}

// Paired is the outcome of a pairing.
type Paired struct {
	// Token is the new connection token, shown only here.
	Token string
	// World is the world's record after pairing.
	World World
	// Again is true when the world kept a clientId it had before.
	Again bool
}

// validate checks the request's parameters, naming the first bad one.
func (r *PairRequest) validate() (code string, err error) {
	if r.Code == "" {
		return "", invalid("'code' is required")
	}
	code, ok := normaliseCode(r.Code)
	if !ok {
		return "", invalid("'code' must be the %d-character pairing code", CodeLength)
	}
	for _, f := range []struct {
		name     string
		value    string
		max      int
		required bool
	}{
		{"worldId", r.WorldID, maxWorldIDBytes, true},
		{"worldTitle", r.WorldTitle, maxTitleBytes, false},
		{"serverFingerprint", r.ServerFingerprint, maxFingerprintBytes, true},
		{"existingClientId", r.ExistingClientID, maxWorldIDBytes, false},
		{"serverOrigin", r.ServerOrigin, maxOriginBytes, false},
	} {
		switch {
		case f.required && strings.TrimSpace(f.value) == "":
			return "", invalid("'%s' is required", f.name)
		case len(f.value) > f.max:
			return "", invalid("'%s' is longer than %d bytes", f.name, f.max)
		case !utf8.ValidString(f.value) || strings.ContainsFunc(f.value, isControl):
			return "", invalid("'%s' must be text without control characters", f.name)
		}
	}
	return code, nil
}

// isControl reports control characters, which no field of a pairing needs.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// Pair consumes the request's code and pairs the world: a code for one
// world pairs that world again, and only such a code does; a code for a
// new world pairs a new world with a new clientId, and is refused with
// ErrCodeForNewWorld when the module presents the clientId
// (existingClientId) and fingerprint of a world paired before, so that
// its game master learns to ask for the right code. The world's earlier
// tokens stop working. A bad parameter is world.ErrInvalid naming it; a
// code that is unknown, used or expired ErrCodeRejected. The code is used
// up even when pairing is refused or storing it fails.
func (p *Pairings) Pair(ctx context.Context, req PairRequest) (Paired, error) {
	code, err := req.validate()
	if err != nil {
		return Paired{}, err
	}
	now := p.now().UTC()
	c, err := p.store.TakeCode(ctx, hashOf(code), now)
	if err != nil {
		return Paired{}, err
	}
	w := World{}
	again := false
	switch {
	case c.ClientID != "":
		if w, err = p.store.World(ctx, c.ClientID); err != nil {
			return Paired{}, err
		}
		again = true
	case req.ExistingClientID != "":
		// A code for a new world never pairs a known one again: that
		// would hand the world's clientId (and every call for it) to
		// whoever holds any code. The module that presents its world's
		// fingerprint is told to ask for a code made for that world; any
		// other module gets a new world, as without existingClientId.
		prior, err := p.store.World(ctx, req.ExistingClientID)
		switch {
		// A world keeps its clientId only within its own account: for a
		// code of another account the world is unknown, and the module
		// links a new world under a new clientId.
		case err == nil && prior.ServerFingerprint == req.ServerFingerprint && prior.Account == c.Account:
			return Paired{}, codeForNewWorld{clientID: prior.ClientID}
		case err != nil && !errors.Is(err, ErrUnknownWorld):
			return Paired{}, err
		}
	}
	if !again {
		if w.ClientID, err = p.newClientID(ctx); err != nil {
			return Paired{}, err
		}
		w.Account = c.Account
	}
	w.WorldID, w.WorldTitle = req.WorldID, req.WorldTitle
	w.ServerFingerprint, w.ServerOrigin = req.ServerFingerprint, req.ServerOrigin
	w.PairedAt, w.UnpairedAt = now, time.Time{}
	token, err := newToken()
	if err != nil {
		return Paired{}, err
	}
	err = p.store.Pair(ctx, Pairing{World: w, Token: Token{Hash: hashOf(token), ClientID: w.ClientID, CreatedAt: now}, New: !again})
	p.dropList()
	if err != nil {
		return Paired{}, err
	}
	return Paired{Token: token, World: w, Again: again}, nil
}

// codeForNewWorld is ErrCodeForNewWorld for one world, with a message that
// tells the game master which code to ask for.
type codeForNewWorld struct{ clientID string }

func (e codeForNewWorld) Error() string {
	return fmt.Sprintf("This pairing code is for a new world, but 'existingClientId' names the linked world '%s': "+
		"pairing it again needs a code created for it (relay worlds pair-code --client %s, or POST /pairing-codes with its clientId)",
		e.clientID, e.clientID)
}

func (e codeForNewWorld) Is(target error) bool { return target == ErrCodeForNewWorld }

// newClientID draws a clientId that no world uses.
func (p *Pairings) newClientID(ctx context.Context) (string, error) {
	for range 8 {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			return "", fmt.Errorf("link: generate clientId: %w", err)
		}
		id := linkedIDPrefix + hex.EncodeToString(b[:])
		if p.taken != nil && p.taken(id) {
			continue
		}
		_, err := p.store.World(ctx, id)
		if errors.Is(err, ErrUnknownWorld) {
			return id, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("link: could not draw an unused clientId")
}

// newToken returns a new random connection token.
func newToken() (string, error) {
	var b [tokenBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("link: generate token: %w", err)
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// Authenticate returns the world of a valid connection token and the
// token's hash, or ErrTokenRejected. Garbage is refused before any lookup.
func (p *Pairings) Authenticate(ctx context.Context, token string) (string, Hash, error) {
	if len(token) != tokenLen || !strings.HasPrefix(token, tokenPrefix) {
		return "", Hash{}, ErrTokenRejected
	}
	h := hashOf(token)
	clientID, err := p.store.TokenWorld(ctx, h)
	if err != nil {
		return "", Hash{}, err
	}
	return clientID, h, nil
}

// Unpair revokes the world's tokens and marks it unpaired; it returns how
// many tokens it revoked.
func (p *Pairings) Unpair(ctx context.Context, clientID string) (int, error) {
	n, err := p.store.Unpair(ctx, clientID, p.now().UTC())
	p.dropList()
	return n, err
}

// World returns the record of a linked world, paired or not.
func (p *Pairings) World(ctx context.Context, clientID string) (World, error) {
	return p.store.World(ctx, clientID)
}

// Worlds returns every linked world's record, paired or not.
// From the relay's own database, the list is read once and then kept until
// a pairing changes it; each caller gets its own copy.
func (p *Pairings) Worlds(ctx context.Context) ([]World, error) {
	if !p.keepList {
		return p.store.Worlds(ctx)
	}
	p.listMu.Lock()
	gen, list, ok := p.listGen, p.list, p.listOK
	p.listMu.Unlock()
	if ok {
		return slices.Clone(list), nil
	}
	list, err := p.store.Worlds(ctx)
	if err != nil {
		return nil, err
	}
	p.listMu.Lock()
	if p.listGen == gen {
		// No pairing changed while the store was read: the list is
		// current.
		p.list, p.listOK = slices.Clone(list), true
	}
	p.listMu.Unlock()
	return list, nil
}

// dropList forgets the kept list of linked worlds after a change to the
// records (made or attempted).
func (p *Pairings) dropList() {
	p.listMu.Lock()
	p.listGen++
	p.list, p.listOK = nil, false
	p.listMu.Unlock()
}
