package steady

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BeatKey is the entry a [Follower] writes to check that its watcher still
// delivers. Every node following a bucket writes it; a node knows its
// watcher works when the revision of its own last write comes through.
const BeatKey = "beat"

// FollowOptions tune a [Follower]; the zero value uses the defaults.
type FollowOptions struct {
	// Beat is how often the follower writes BeatKey (one second when 0).
	Beat time.Duration
	// Stale is how long a written beat may take to come back through the
	// watcher before the watcher is replaced (three seconds when 0).
	Stale time.Duration
	// Log receives the replacements; slog.Default when nil.
	Log *slog.Logger
	// watch opens a watcher; kv.WatchFiltered when nil (tests replace it).
	watch func(ctx context.Context, kv jetstream.KeyValue, filters []string) (jetstream.KeyWatcher, error)
}

// Follower applies a bucket's changes as they happen, and replaces its
// watcher when the watcher stops delivering. A key-value watcher rides on
// an ordered consumer that the client library recreates after a lost
// server; when JetStream refuses the new consumer (no leader yet), the
// library gives up and the watcher stays silent with its channel open. A
// follower of the keys bucket that went silent would keep accepting
// revoked keys, so the follower writes BeatKey every Beat and expects each
// write back through its watcher within Stale; if one does not come, it
// opens a new watcher, which delivers every current entry again.
type Follower struct {
	kv      jetstream.KeyValue
	filters []string
	apply   func(jetstream.KeyValueEntry)
	opts    FollowOptions

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	seenBeat uint64 // the highest beat revision the watcher delivered

	replaced int // watchers replaced (for tests), under mu
}

// Follow loads every current entry of kv matching filters into apply,
// then keeps applying changes until Close. apply is called from one
// goroutine at a time; after a watcher is replaced it sees current entries
// again, which it must take as updates of what it knows (by revision).
func Follow(ctx context.Context, kv jetstream.KeyValue, filters []string, opts FollowOptions, apply func(jetstream.KeyValueEntry)) (*Follower, error) {
	if opts.Beat <= 0 {
		opts.Beat = time.Second
	}
	if opts.Stale <= 0 {
		opts.Stale = 3 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.watch == nil {
		opts.watch = func(ctx context.Context, kv jetstream.KeyValue, filters []string) (jetstream.KeyWatcher, error) {
			return kv.WatchFiltered(ctx, filters)
		}
	}
	f := &Follower{kv: kv, filters: append(append([]string(nil), filters...), BeatKey), apply: apply, opts: opts, done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancel(context.Background())
	w, updates, err := f.openFirst(ctx)
	if err != nil {
		f.cancel()
		return nil, err
	}
	go f.run(w, updates)
	return f, nil
}

// openWait bounds how long Follow asks again for its first watcher.
const openWait = time.Minute

// openFirst opens the follower's first watcher. A bucket created a moment
// ago may still be electing its stream's first leader, and a loaded
// machine may answer the creation of the watcher's consumer after the
// client library's time-out of five seconds: a node starting then asks
// again, for up to openWait and never past ctx, rather than fail to start.
func (f *Follower) openFirst(ctx context.Context) (w jetstream.KeyWatcher, updates <-chan jetstream.KeyValueEntry, err error) {
	err = AskAgain(ctx, openWait, func(err error) {
		f.opts.Log.Debug("cannot follow a key-value bucket yet", "bucket", f.kv.Bucket(), "error", err)
	}, func() (err error) {
		w, updates, err = f.open(ctx)
		return err
	})
	return w, updates, err
}

// open opens a watcher and applies the current entries it sends first,
// returning it with the channel of later changes.
func (f *Follower) open(ctx context.Context) (jetstream.KeyWatcher, <-chan jetstream.KeyValueEntry, error) {
	wctx, stop := context.WithCancel(f.ctx)
	// The client library writes its subjects over the filters it is
	// given: each watcher gets its own copy.
	w, err := f.opts.watch(wctx, f.kv, slices.Clone(f.filters))
	if err != nil {
		stop()
		return nil, nil, err
	}
	w = stoppingWatcher{KeyWatcher: w, stop: stop}
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				_ = w.Stop()
				return nil, nil, errors.New("watcher ended while loading")
			}
			if e == nil {
				return w, w.Updates(), nil
			}
			f.take(e)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, nil, ctx.Err()
		}
	}
}

// stoppingWatcher also cancels the context the watcher was opened with.
type stoppingWatcher struct {
	jetstream.KeyWatcher
	stop context.CancelFunc
}

func (w stoppingWatcher) Stop() error {
	w.stop()
	return w.KeyWatcher.Stop()
}

// take applies one delivered entry, or notes a beat.
func (f *Follower) take(e jetstream.KeyValueEntry) {
	if e.Key() == BeatKey {
		f.mu.Lock()
		f.seenBeat = max(f.seenBeat, e.Revision())
		f.mu.Unlock()
		return
	}
	f.apply(e)
}

// run applies changes, writes beats, and replaces a watcher that went
// silent or ended, until Close.
func (f *Follower) run(w jetstream.KeyWatcher, updates <-chan jetstream.KeyValueEntry) {
	defer close(f.done)
	defer func() { _ = w.Stop() }()
	beat := time.NewTicker(f.opts.Beat)
	defer beat.Stop()
	// The oldest beat written that has not come back yet, and when.
	var waitRev uint64
	var waitSince time.Time
	for {
		select {
		case <-f.ctx.Done():
			return
		case e, ok := <-updates:
			if ok {
				if e != nil {
					f.take(e)
				}
				continue
			}
			f.opts.Log.Warn("a key-value watcher ended: following the bucket with a new one", "bucket", f.kv.Bucket())
		case <-beat.C:
			f.mu.Lock()
			seen := f.seenBeat
			f.mu.Unlock()
			if waitRev != 0 && seen >= waitRev {
				waitRev = 0
			}
			if waitRev != 0 && time.Since(waitSince) > f.opts.Stale {
				f.opts.Log.Warn("a key-value watcher stopped delivering: following the bucket with a new one", "bucket", f.kv.Bucket(), "beatRevision", waitRev, "seen", seen)
			} else {
				f.writeBeat(&waitRev, &waitSince)
				continue
			}
		}
		// Replace the watcher; until a new one opens, try again every beat.
		_ = w.Stop()
		for {
			ctx, cancel := context.WithTimeout(f.ctx, Wait)
			nw, nu, err := f.open(ctx)
			cancel()
			if err == nil {
				w, updates = nw, nu
				waitRev = 0
				f.mu.Lock()
				f.replaced++
				f.mu.Unlock()
				break
			}
			if f.ctx.Err() != nil {
				return
			}
			f.opts.Log.Warn("cannot follow a key-value bucket yet", "bucket", f.kv.Bucket(), "error", err)
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(f.opts.Beat):
			}
		}
	}
}

// writeBeat writes a beat when none is awaited. A beat that cannot be
// written (the bucket electing a leader) says nothing about the watcher.
func (f *Follower) writeBeat(waitRev *uint64, waitSince *time.Time) {
	if *waitRev != 0 {
		return
	}
	ctx, cancel := context.WithTimeout(f.ctx, f.opts.Beat)
	defer cancel()
	sent := time.Now()
	rev, err := f.kv.Put(ctx, BeatKey, nil)
	if err != nil {
		return
	}
	*waitRev, *waitSince = rev, sent
}

// Replaced returns how many times the follower replaced its watcher.
func (f *Follower) Replaced() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.replaced
}

// Close stops following, waiting at most timeout for the watcher to end.
func (f *Follower) Close(timeout time.Duration) {
	f.cancel()
	select {
	case <-f.done:
	case <-time.After(timeout):
	}
}
