package server

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabletop-relay/relay/server/keys"
)

// limitsTTL is how long a node keeps an account's limits before reading
// them again: a change of quotas made on another node of a cluster takes
// effect within it (at once on the node that made it).
const limitsTTL = time.Second

// cachedLimits is an account's limits as read at some time.
type cachedLimits struct {
	limits keys.Quotas
	read   time.Time
}

// limitsFor returns the limits that apply to the account id, from a cache
// that is at most limitsTTL old: the calls that check them (every call,
// for the requests a minute) do not read the store each time.
func (p *quotaPolicy) limitsFor(ctx context.Context, id string) (keys.Quotas, error) {
	now := time.Now()
	p.mu.Lock()
	c, ok := p.cache[id]
	p.mu.Unlock()
	if ok && now.Sub(c.read) < limitsTTL {
		return c.limits, nil
	}
	_, lim, err := p.account(ctx, id)
	if err != nil {
		// A node cut off from the shared state keeps its last view of
		// the limits, as it keeps its view of the keys: the call is then
		// answered by what the world's state allows, not refused for the
		// lookup.
		if ok {
			return c.limits, nil
		}
		return keys.Quotas{}, err
	}
	p.mu.Lock()
	if p.cache == nil {
		p.cache = map[string]cachedLimits{}
	}
	p.cache[id] = cachedLimits{limits: lim, read: now}
	p.mu.Unlock()
	return lim, nil
}

// forget drops an account's cached limits once they changed here.
func (p *quotaPolicy) forget(id string) {
	p.mu.Lock()
	delete(p.cache, id)
	p.mu.Unlock()
	p.rates.forget(id)
}

// accountRates limits the calls of each account, all its keys together,
// with a token bucket per account that holds a minute's worth and refills
// at the account's rate. Each node counts the calls it serves; in a
// cluster each node takes its share of the live nodes, as the per-key
// limiter does (see [RateLimiter.ShareWith]): a call costs as many tokens
// as there are live nodes, so that the nodes together allow about the
// account's rate.
type accountRates struct {
	// nodes, when set, counts the live nodes that share the quota; it is
	// read from memory on every call.
	nodes atomic.Pointer[func() int]

	mu      sync.Mutex
	buckets map[string]*accountBucket
}

// shareWith makes the rates one node's share of a cluster's (see
// accountRates).
func (r *accountRates) shareWith(nodes func() int) {
	if nodes != nil {
		r.nodes.Store(&nodes)
	}
}

// cost is the tokens one call takes: the number of live nodes (one on a
// node alone).
func (r *accountRates) cost() float64 {
	f := r.nodes.Load()
	if f == nil {
		return 1
	}
	return float64(max((*f)(), 1))
}

// accountBucket is one account's tokens as of last, and the calls it
// made in the minute that began at minute.
type accountBucket struct {
	tokens float64
	last   time.Time
	minute time.Time
	calls  int64
}

// allow takes a token of the account's bucket, which holds perMinute
// tokens; when there is none it answers false and how long until there
// is one.
func (r *accountRates) allow(account string, perMinute int64, now time.Time) (bool, time.Duration) {
	perToken := time.Minute / time.Duration(perMinute)
	cost := r.cost()
	// The bucket can always hold one call's cost, so that a quota smaller
	// than the number of nodes still lets calls through, slowly.
	capacity := math.Max(float64(perMinute), cost)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.buckets == nil {
		r.buckets = map[string]*accountBucket{}
	}
	b := r.buckets[account]
	if b == nil {
		b = &accountBucket{tokens: capacity, last: now, minute: now}
		r.buckets[account] = b
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = math.Min(capacity, b.tokens+float64(elapsed)/float64(perToken))
		b.last = now
	}
	if now.Sub(b.minute) >= time.Minute {
		b.minute, b.calls = now, 0
	}
	if b.tokens >= cost {
		b.tokens -= cost
		b.calls++
		return true, 0
	}
	return false, time.Duration((cost - b.tokens) * float64(perToken))
}

// thisMinute counts the calls the account made in its current minute.
func (r *accountRates) thisMinute(account string, now time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buckets[account]
	if b == nil || now.Sub(b.minute) >= time.Minute {
		return 0
	}
	return b.calls
}

// forget drops an account's bucket (its quota changed, or it is gone).
func (r *accountRates) forget(account string) {
	r.mu.Lock()
	delete(r.buckets, account)
	r.mu.Unlock()
}

// accountRateLimit is the chain's step after the key's own rate limit:
// the call spends a token of its account's bucket, when the account has
// a limit of requests a minute. Past it the call is refused with 429 and
// Retry-After, naming the quota.
func (c *Chain) accountRateLimit(ctx context.Context, call *Call, _ any) error {
	if c.Quotas == nil || isPublic(call.Method) || call.forwarded || call.Key.ID == "" {
		// A forwarded call spent its token on the edge node.
		return nil
	}
	account := call.Key.Account()
	lim, err := c.Quotas.limitsFor(ctx, account)
	if err != nil {
		// The account cannot be read (a node cut off from the shared
		// state, before it ever read this account): the key was admitted
		// from the node's own view, and the call goes on unmetered rather
		// than failing for a rate it cannot know. Whatever the world's
		// own state says (its lease) still answers it.
		c.Log.WarnContext(ctx, "account limits unavailable: the call is not metered", "account", account, "err", err)
		return nil
	}
	if lim.RequestsPerMinute <= 0 {
		return nil
	}
	if ok, wait := c.Quotas.rates.allow(account, lim.RequestsPerMinute, time.Now()); !ok {
		return retryLater(wait, func(seconds int) string {
			return fmt.Sprintf("Account quota reached: 'requestsPerMinute' allows %d requests per minute for the account's keys together; retry in %d s", lim.RequestsPerMinute, seconds)
		})
	}
	return nil
}

// storedTTL is how long a node keeps an account's stored bytes before
// measuring its worlds again: the check of document writes reads no disk
// each call, and a flood of writes overshoots the quota by at most what
// it writes in that time.
const storedTTL = time.Second

// storedBytes returns what the embedded worlds of account hold on disk,
// measured at most storedTTL ago.
func (p *quotaPolicy) storedBytes(ctx context.Context, account string) int64 {
	now := time.Now()
	p.mu.Lock()
	c, ok := p.stored[account]
	p.mu.Unlock()
	if ok && now.Sub(c.read) < storedTTL {
		return c.bytes
	}
	n := p.worlds.StoredBytes(ctx, account)
	p.mu.Lock()
	if p.stored == nil {
		p.stored = map[string]cachedBytes{}
	}
	p.stored[account] = cachedBytes{bytes: n, read: now}
	p.mu.Unlock()
	return n
}

// embeddedOwners is what WorldOwners may also offer: the owner of an
// embedded world from memory (the operator's account when it has no
// record), without the lookup of linked worlds that Owner may make.
type embeddedOwners interface {
	EmbeddedOwner(clientID string) string
}

// cachedBytes is a size as measured at some time.
type cachedBytes struct {
	bytes int64
	read  time.Time
}

// growingScopes are the scopes of the calls that may make a world hold
// more: documents, folders, encounters, scripts and files.
var growingScopes = map[string]bool{
	keys.ScopeEntityWrite:     true,
	keys.ScopeStructureWrite:  true,
	keys.ScopeEncounterManage: true,
	keys.ScopeExecuteJS:       true,
	keys.ScopeFileWrite:       true,
}

// shrinks reports whether an operation only removes: such calls stay
// allowed past the quota, so that an account can make room.
func shrinks(operation string) bool {
	return strings.HasPrefix(operation, "delete") || strings.HasPrefix(operation, "remove") || strings.HasPrefix(operation, "end-")
}

// checkStoredBytes is the chain's step before the handler of a call that
// may make an embedded world hold more. When the world's database is at
// the world's bound (its share of the per-world memory bound, see
// Config.WorldDocumentBytes), or the account that owns the world has a
// quota of stored bytes and its embedded worlds hold that much, the call
// is refused with 403 naming the limit, and nothing changes. Calls that
// only remove pass. It runs on the node that holds the world.
func (c *Chain) checkStoredBytes(ctx context.Context, call *Call, _ any) error {
	if c.Quotas == nil || c.Quotas.worlds == nil || call.World == nil || call.Policy == nil {
		return nil
	}
	if !growingScopes[call.Policy.GetScope()] || shrinks(call.Policy.GetOperation()) {
		return nil
	}
	clientID := call.World.Info().ClientID
	if max := c.Quotas.worldBytes; max > 0 {
		if n := c.Quotas.worlds.DatabaseBytes(clientID); n >= max {
			return status.Errorf(codes.PermissionDenied, "World size limit reached: world '%s' holds %d bytes of documents and events, the most the relay keeps for one world (--world-memory-bytes less --event-ring-bytes: %d); remove documents first", clientID, n, max)
		}
	}
	// An embedded world's owner is known in memory, so that a write asks
	// the shared state nothing. For a linked world the answer may be
	// the operator's account, but such a world counts no stored bytes:
	// it is told apart below, and only when a limit applies.
	owner := keys.OperatorAccount
	if eo, ok := c.Owners.(embeddedOwners); ok {
		owner = eo.EmbeddedOwner(clientID)
	} else if c.Owners != nil {
		o, err := c.Owners.Owner(ctx, clientID)
		if err != nil {
			return toStatus(ctx, c.Log, err)
		}
		owner = o
	}
	lim, err := c.Quotas.limitsFor(ctx, owner)
	if err != nil {
		return toStatus(ctx, c.Log, err)
	}
	if lim.StoredBytes <= 0 || !c.Quotas.worlds.Holds(ctx, clientID) {
		return nil
	}
	if c.Quotas.storedBytes(ctx, owner) >= lim.StoredBytes {
		return quotaReached("storedBytes", lim.StoredBytes, "bytes of embedded worlds; remove documents, files or a world first")
	}
	return nil
}
