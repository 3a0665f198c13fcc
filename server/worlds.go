package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relayv1 "github.com/tabletop-relay/relay/gen/go/relay/v1"
	"github.com/tabletop-relay/relay/server/keys"
	"github.com/tabletop-relay/relay/world"
)

// EmbeddedWorlds makes and removes the relay's own worlds for the world
// service, and counts what each account holds (wired in package node).
// Errors are world errors: a taken client id is world.ErrConflict, an
// unknown world world.ErrNotFound.
type EmbeddedWorlds interface {
	// CreateWorld makes the embedded world clientID from the named seed
	// (SeedDemo or SeedEmpty) with the given title, owned by account.
	CreateWorld(ctx context.Context, account, clientID, title, seed string) (world.Info, error)
	// DeleteWorld removes the embedded world clientID with everything it
	// holds, and forgets its owner. A linked world is world.ErrInvalid.
	DeleteWorld(ctx context.Context, clientID string) error
	// CountWorlds counts the worlds, embedded and linked, that account
	// owns.
	CountWorlds(ctx context.Context, account string) (int64, error)
	// StoredBytes is what the embedded worlds of account hold on disk.
	StoredBytes(ctx context.Context, account string) int64
	// Holds reports whether clientID is an embedded world of this node.
	Holds(ctx context.Context, clientID string) bool
	// DatabaseBytes is the size of the embedded world's database (its
	// documents, settings and kept events), 0 for an unknown one.
	DatabaseBytes(clientID string) int64
}

// The seeds a new embedded world starts from.
const (
	// SeedDemo is the demo world's content and files.
	SeedDemo = "demo"
	// SeedEmpty is one game master user and nothing else.
	SeedEmpty = "empty"
)

// The relay's default quotas of an account other than the operator's.
const (
	// DefaultAccountMaxWorlds is how many worlds an account may own.
	DefaultAccountMaxWorlds = 10
	// DefaultAccountMaxStreams is how many event streams an account's
	// keys may hold open on one node.
	DefaultAccountMaxStreams = 200
	// DefaultAccountRequestsPerMinute is how many calls an account's keys
	// may make a minute on one node.
	DefaultAccountRequestsPerMinute = 6000
	// DefaultAccountMaxStoredBytes is what an account's embedded worlds
	// may hold on disk: 1 GiB.
	DefaultAccountMaxStoredBytes = 1 << 30
)

// maxWorldTitleLen bounds a new world's title.
const maxWorldTitleLen = 200

// worldService implements relayv1.WorldServiceServer.
type worldService struct {
	relayv1.UnimplementedWorldServiceServer
	worlds EmbeddedWorlds
	quotas *quotaPolicy
	chain  *Chain
	// creating serialises the creations of each account, so that two
	// calls at once cannot both pass the quota with one world left.
	creating *accountLocks
}

// accountLocks hands out one mutex per account.
type accountLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// lock locks the account's mutex and returns its unlock.
func (l *accountLocks) lock(account string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m := l.locks[account]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[account] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// newWorldID picks a client id for a world made without one.
func newWorldID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "w_" + hex.EncodeToString(b[:]), nil
}

// checkWorldTitle trims a new world's title and checks it, naming `title`.
func checkWorldTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	switch {
	case title == "":
		return "", world.Errorf(world.ErrInvalid, "'title' is required")
	case !utf8.ValidString(title):
		return "", world.Errorf(world.ErrInvalid, "'title' is not valid UTF-8")
	case utf8.RuneCountInString(title) > maxWorldTitleLen:
		return "", world.Errorf(world.ErrInvalid, "'title' is longer than %d characters", maxWorldTitleLen)
	case strings.IndexFunc(title, unicode.IsControl) >= 0:
		return "", world.Errorf(world.ErrInvalid, "'title' contains control characters")
	}
	return title, nil
}

// checkWorldClientID checks a client id given for a new world, naming
// `clientId`.
func checkWorldClientID(clientID string) error {
	if clientID == "" {
		return nil
	}
	first := clientID[0]
	if err := checkClientID(clientID, false); err != nil || first == '_' || first == '-' {
		return world.Errorf(world.ErrInvalid, "'clientId' must be 1 to 64 letters, digits, '_' or '-', starting with a letter or digit")
	}
	return nil
}

func (s worldService) CreateWorld(ctx context.Context, req *relayv1.CreateWorldRequest) (*relayv1.CreateWorldResponse, error) {
	k := CallFrom(ctx).Key
	if len(k.ClientIDs) > 0 {
		return nil, status.Errorf(codes.PermissionDenied, "API key bound to worlds (%s) may not make a world", strings.Join(k.ClientIDs, ", "))
	}
	if k.ScopedUserID != "" {
		return nil, status.Error(codes.PermissionDenied, "API key acting as a tabletop user may not make worlds")
	}
	clientID := strings.TrimSpace(req.GetClientId())
	if err := checkWorldClientID(clientID); err != nil {
		return nil, err
	}
	title, err := checkWorldTitle(req.GetTitle())
	if err != nil {
		return nil, err
	}
	seed := strings.TrimSpace(req.GetSeed())
	if seed != SeedDemo && seed != SeedEmpty {
		return nil, world.Errorf(world.ErrInvalid, "'seed' must be '%s' or '%s'", SeedDemo, SeedEmpty)
	}
	if s.worlds == nil {
		return nil, status.Error(codes.Unavailable, "Embedded worlds cannot be made on this relay")
	}
	if clientID == "" {
		if clientID, err = newWorldID(); err != nil {
			return nil, err
		}
	}
	account := k.Account()
	unlock := s.creating.lock(account)
	defer unlock()
	if err := s.quotas.checkWorlds(ctx, account, s.worlds); err != nil {
		return nil, err
	}
	info, err := s.worlds.CreateWorld(ctx, account, clientID, title, seed)
	if err != nil {
		return nil, err
	}
	return &relayv1.CreateWorldResponse{ClientId: info.ClientID, Title: info.Title, System: info.System, Seed: seed, AccountId: account}, nil
}

func (s worldService) DeleteWorld(ctx context.Context, req *relayv1.DeleteWorldRequest) (*relayv1.DeleteWorldResponse, error) {
	clientID := strings.TrimSpace(req.GetClientId())
	if err := checkClientID(clientID, true); err != nil {
		return nil, err
	}
	k := CallFrom(ctx).Key
	// Another account's world is answered as one that does not exist,
	// before anything else is said about it.
	if ok, err := s.chain.reaches(ctx, k, clientID); err != nil {
		return nil, err
	} else if !ok {
		return nil, UnknownWorld(clientID)
	}
	if !k.BoundTo(clientID) {
		return nil, status.Errorf(codes.PermissionDenied, "API key is not authorized for client '%s'", clientID)
	}
	if k.UserFor(clientID) != "" {
		return nil, status.Errorf(codes.PermissionDenied, "API key acting as a tabletop user in world '%s' may not remove it", clientID)
	}
	if s.worlds == nil {
		return nil, status.Error(codes.Unavailable, "Embedded worlds cannot be removed on this relay")
	}
	if err := s.remove(ctx, CallFrom(ctx), clientID); err != nil {
		return nil, err
	}
	return &relayv1.DeleteWorldResponse{ClientId: clientID}, nil
}

// remove removes the embedded world clientID where it lives. In a cluster
// the world's host removes it: the removal goes there as the calls for a
// world do, as call (with the key resolved here), and the host takes the
// world out of the registry, deletes its replicated log and its events,
// and has its followers drop their copies.
func (s worldService) remove(ctx context.Context, call *Call, clientID string) error {
	if !call.forwarded && s.chain.Worlds != nil {
		w, err := s.chain.Worlds.World(ctx, clientID)
		if remote, ok := w.(RemoteWorld); err == nil && ok {
			_, err := s.chain.forward(ctx, call, remote, &relayv1.DeleteWorldRequest{ClientId: clientID}, relayv1.WorldService_DeleteWorld_FullMethodName)
			return err
		}
		if err != nil && !errors.Is(err, world.ErrNotFound) {
			return err
		}
	}
	return s.worlds.DeleteWorld(ctx, clientID)
}

// quotaPolicy applies the accounts' quotas: each account's own, or the
// relay's defaults where they are 0. The operator's account is bound only
// by quotas of its own.
type quotaPolicy struct {
	accounts keys.Accounts
	defaults keys.Quotas
	// rates counts each account's calls (accountquota.go).
	rates accountRates
	// worlds measures the accounts' embedded worlds; nil measures none.
	worlds EmbeddedWorlds
	// worldBytes bounds the database of each embedded world (its share of
	// the per-world memory bound beside its kept events); 0 sets none.
	worldBytes int64

	mu     sync.Mutex
	cache  map[string]cachedLimits
	stored map[string]cachedBytes
}

// limits returns the limits that apply to a: its own quotas, with the
// defaults where they are 0 (not for the operator's account); 0 means no
// limit.
func (p *quotaPolicy) limits(a keys.Account) keys.Quotas {
	q := a.Quotas
	if a.ID == keys.OperatorAccount {
		return q
	}
	d := p.defaults
	q.Worlds = orDefault(q.Worlds, d.Worlds)
	q.Keys = orDefault(q.Keys, d.Keys)
	q.Streams = orDefault(q.Streams, d.Streams)
	q.RequestsPerMinute = orDefault(q.RequestsPerMinute, d.RequestsPerMinute)
	q.UploadBytes = orDefault(q.UploadBytes, d.UploadBytes)
	q.StoredBytes = orDefault(q.StoredBytes, d.StoredBytes)
	return q
}

func orDefault(v, d int64) int64 {
	if v == 0 {
		return d
	}
	return v
}

// account reads an account and its limits.
func (p *quotaPolicy) account(ctx context.Context, id string) (keys.Account, keys.Quotas, error) {
	a, err := p.accounts.GetAccount(ctx, id)
	if err != nil {
		return keys.Account{}, keys.Quotas{}, err
	}
	return a, p.limits(a), nil
}

// quotaReached is the refusal of a call over the quota named.
func quotaReached(name string, limit int64, what string) error {
	return status.Errorf(codes.PermissionDenied, "Account quota reached: '%s' allows %d %s", name, limit, what)
}

// checkWorlds refuses a new world of an account that owns as many worlds
// as its quota allows, or whose embedded worlds hold as many bytes.
func (p *quotaPolicy) checkWorlds(ctx context.Context, account string, worlds EmbeddedWorlds) error {
	_, lim, err := p.account(ctx, account)
	if err != nil {
		return err
	}
	if lim.Worlds > 0 {
		n, err := worlds.CountWorlds(ctx, account)
		if err != nil {
			return err
		}
		if n >= lim.Worlds {
			return quotaReached("worlds", lim.Worlds, "worlds; remove one first")
		}
	}
	if lim.StoredBytes > 0 && worlds.StoredBytes(ctx, account) >= lim.StoredBytes {
		return quotaReached("storedBytes", lim.StoredBytes, "bytes of embedded worlds; remove a world or files first")
	}
	return nil
}
