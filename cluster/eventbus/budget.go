package eventbus

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The byte budget of each world's events in the events stream.
//
// JetStream bounds a stream's messages per subject by count only, and a
// stream-wide MaxBytes would let one world's large events evict every
// other world's history. So the node that publishes a world's events also
// keeps the world's stored bytes within Options.RingBytes: it tracks the
// stream sequence and stored size of each of the world's kept events (from
// the publications' acknowledgements) and, once they pass the budget,
// purges the world's subject below the oldest event it keeps, so that the
// world's oldest events leave first and no other world's are touched.
// The purges run on a goroutine of their own, after the acknowledgements:
// neither a world's writers nor any read waits for them.
//
// A node that starts publishing a world another node published before (a
// linked world that moved, an embedded world after a restart or a
// failover) reads the sizes of the world's kept events from the stream
// first, with a headers-only consumer (the payloads do not travel), so
// that the events of the previous host count too; it reads them again
// whenever its own numbering shows that another node published in
// between. This also trims, at its first event, a world whose stream
// subject a relay without the budget filled.

// trimToEighths is how far a purge brings a world's events once they pass
// the budget, in eighths of it: a world writing large events then sends a
// purge every eighth of its budget rather than at every event.
const trimToEighths = 7

// idleWindow is how long the sizes of a world's kept events stay in
// memory after the node last published one of its events; a world
// published again after that is read from the stream again.
const idleWindow = 10 * time.Minute

// reloadAfter is how long after reading a world's kept events from the
// stream a node reads them again when its numbering shows that another
// node published in between: a world whose numbers skip for another
// reason (an event that could not be encoded) is not read at every event.
const reloadAfter = 5 * time.Second

// loadWait bounds the reading of a world's kept events' sizes.
const loadWait = 10 * time.Second

// budget keeps each world's events in the events stream within its byte
// limit.
type budget struct {
	js       jetstream.JetStream
	limit    int64
	ringSize int
	log      func(msg string, args ...any)

	mu     sync.Mutex
	worlds map[string]*window // by subject
	due    map[string]bool    // subjects waiting for the trimmer
	// forgets are the subjects of worlds that are gone, waiting for the
	// trimmer, with how many of their newest events to keep; forgotten
	// are those done since the node last published them.
	forgets   map[string]uint64
	forgotten map[string]bool
	wake      chan struct{}

	stream  jetstream.Stream // opened once, again after an error
	failing atomic.Bool      // the last purge failed (logged once a run of failures)
}

// window is what a node knows of one world's kept events.
type window struct {
	kept  []keptEvent // by stream sequence, oldest first
	bytes int64
	// last is the world's sequence number of the last event this node
	// stored: an event that does not follow it shows that another node
	// published in between.
	last uint64
	// loaded is set once kept holds the stream's events of the world, not
	// only this node's.
	loaded   bool
	loadedAt time.Time
	used     time.Time
}

// keptEvent is one kept event: its stream sequence and its stored size.
type keptEvent struct {
	stream uint64
	size   int64
}

func newBudget(js jetstream.JetStream, limit int64, ringSize int, log func(string, ...any)) *budget {
	return &budget{js: js, limit: limit, ringSize: ringSize, log: log,
		worlds: map[string]*window{}, due: map[string]bool{}, forgets: map[string]uint64{}, forgotten: map[string]bool{}, wake: make(chan struct{}, 1)}
}

// storedSize is what JetStream's file store counts for one event message
// of subject with sequence number seq and a payload of dataLen bytes: its
// record (34 bytes), subject, headers (as eventMsg sets them) and payload.
func storedSize(subject string, seq uint64, dataLen int) int64 {
	s := len(strconv.FormatUint(seq, 10))
	const framing = len("NATS/1.0\r\n") + len("\r\n")
	header := framing + len(seqHeader) + 2 + s + 2 + len(jetstream.MsgIDHeader) + 2 + len(subject) + 1 + s + 2
	return int64(34 + len(subject) + header + dataLen)
}

// stored notes an event the stream acknowledged: the world's sequence
// number seq, stored at stream sequence streamSeq with size bytes.
func (g *budget) stored(subject string, seq, streamSeq uint64, size int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.worlds[subject]
	if w == nil {
		w = &window{}
		g.worlds[subject] = w
	}
	if w.loaded && w.last != 0 && seq > w.last+1 && time.Since(w.loadedAt) > reloadAfter {
		// Another node published the events in between (or this node
		// dropped them, which reading the stream again tells apart).
		w.loaded = false
	}
	w.last = max(w.last, seq)
	w.used = time.Now()
	delete(g.forgotten, subject)
	w.add(keptEvent{stream: streamSeq, size: size}, g.ringSize)
	if !w.loaded || w.bytes > g.limit {
		g.scheduleLocked(subject)
	}
}

// check makes the trimmer read a world's kept events from the stream and
// bring them within the budget (after a backfill, say, which publishes
// without the acknowledgements that feed the window).
func (g *budget) check(subject string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.worlds[subject]
	if w == nil {
		w = &window{}
		g.worlds[subject] = w
	}
	w.loaded = false
	w.used = time.Now()
	g.scheduleLocked(subject)
}

// forget makes the trimmer remove a world's events from the stream but
// the keep newest, once per world until the node publishes it again.
func (g *budget) forget(subject string, keep uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.forgotten[subject] {
		return
	}
	g.forgets[subject] = keep
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

func (g *budget) scheduleLocked(subject string) {
	g.due[subject] = true
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// add inserts an event in stream order, once; the stream keeps at most
// ringSize events of a world, so older ones are forgotten.
func (w *window) add(e keptEvent, ringSize int) {
	i := len(w.kept)
	for i > 0 && w.kept[i-1].stream >= e.stream {
		if w.kept[i-1].stream == e.stream {
			return
		}
		i--
	}
	w.kept = append(w.kept, keptEvent{})
	copy(w.kept[i+1:], w.kept[i:])
	w.kept[i] = e
	w.bytes += e.size
	if over := len(w.kept) - ringSize; over > 0 {
		w.drop(over)
	}
}

// drop forgets the n oldest events.
func (w *window) drop(n int) {
	for _, e := range w.kept[:n] {
		w.bytes -= e.size
	}
	w.kept = append(w.kept[:0], w.kept[n:]...)
}

// run trims the worlds that need it until stop closes.
func (g *budget) run(stop <-chan struct{}) {
	// A stopping node does not wait for a stream that does not answer.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	tidy := time.NewTicker(idleWindow / 4)
	defer tidy.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tidy.C:
			g.forgetIdle()
			continue
		case <-g.wake:
		}
		g.mu.Lock()
		subjects := make([]string, 0, len(g.due))
		for s := range g.due {
			subjects = append(subjects, s)
		}
		clear(g.due)
		forgets := maps.Clone(g.forgets)
		clear(g.forgets)
		g.mu.Unlock()
		for subject, keep := range forgets {
			if err := g.purgeAll(ctx, subject, keep); err != nil {
				g.log("could not remove the events of a world that is gone from the events stream; trying again", "subject", subject, "error", err)
				time.AfterFunc(publishBackoff, func() { g.forget(subject, keep) })
			}
		}
		for _, subject := range subjects {
			select {
			case <-stop:
				return
			default:
			}
			if err := g.trim(ctx, subject); err != nil {
				if g.failing.CompareAndSwap(false, true) {
					g.log("could not keep a world's events in the events stream within their byte budget; trying again", "subject", subject, "error", err)
				}
				// Again after a pause: a stream electing a leader answers
				// nothing for a while.
				time.AfterFunc(publishBackoff, func() {
					g.mu.Lock()
					defer g.mu.Unlock()
					if g.worlds[subject] != nil {
						g.scheduleLocked(subject)
					}
				})
				continue
			}
			g.failing.Store(false)
		}
	}
}

// purgeAll removes a world's events from the stream but the keep newest,
// and what the node knew of them.
func (g *budget) purgeAll(ctx context.Context, subject string, keep uint64) error {
	ctx, cancel := context.WithTimeout(ctx, loadWait)
	defer cancel()
	stream, err := g.openStream(ctx)
	if err != nil {
		return err
	}
	opts := []jetstream.StreamPurgeOpt{jetstream.WithPurgeSubject(subject)}
	if keep > 0 {
		opts = append(opts, jetstream.WithPurgeKeep(keep))
	}
	if err := stream.Purge(ctx, opts...); err != nil {
		g.dropStream()
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.worlds, subject)
	g.forgotten[subject] = true
	return nil
}

// forgetIdle forgets the worlds this node has not published for a while.
func (g *budget) forgetIdle() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for s, w := range g.worlds {
		if time.Since(w.used) > idleWindow {
			delete(g.worlds, s)
		}
	}
}

// trim reads a world's kept events when the node does not know them all,
// and purges the oldest ones when they pass the budget.
func (g *budget) trim(ctx context.Context, subject string) error {
	ctx, cancel := context.WithTimeout(ctx, loadWait)
	defer cancel()
	stream, err := g.openStream(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	w := g.worlds[subject]
	loaded := w != nil && w.loaded
	g.mu.Unlock()
	if w == nil {
		return nil
	}
	// When the kept events cannot be read, the node still trims what it
	// knows (its own events), and reads them again later.
	var loadErr error
	var kept []keptEvent
	if !loaded {
		if kept, loadErr = g.load(ctx, stream, subject); loadErr != nil {
			g.dropStream()
		}
	}
	if !loaded && loadErr == nil {
		g.mu.Lock()
		// Events acknowledged while the stream was read are newer than
		// the last one read; older ones that were not read are gone.
		var newest uint64
		if len(kept) > 0 {
			newest = kept[len(kept)-1].stream
		}
		fresh := &window{last: w.last, used: w.used, loaded: true, loadedAt: time.Now()}
		for _, e := range kept {
			fresh.add(e, g.ringSize)
		}
		for _, e := range w.kept {
			if e.stream > newest {
				fresh.add(e, g.ringSize)
			}
		}
		if g.worlds[subject] == w {
			g.worlds[subject] = fresh
		}
		w = fresh
		g.mu.Unlock()
	}
	g.mu.Lock()
	if w.bytes <= g.limit || len(w.kept) < 2 {
		g.mu.Unlock()
		return loadErr
	}
	// The oldest events leave until the rest fit in seven eighths of the
	// budget; the newest event stays even when it alone is larger.
	target := g.limit / 8 * trimToEighths
	bytes, cut := w.bytes, 0
	for cut < len(w.kept)-1 && bytes > target {
		bytes -= w.kept[cut].size
		cut++
	}
	below := w.kept[cut].stream
	g.mu.Unlock()
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(below)); err != nil {
		g.dropStream()
		return errors.Join(loadErr, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// Forget what the purge removed (the window may have changed since).
	n := 0
	for n < len(w.kept) && w.kept[n].stream < below {
		n++
	}
	w.drop(n)
	return loadErr
}

// load reads the stream sequence and size of each kept event of subject,
// oldest first, with a headers-only consumer.
func (g *budget) load(ctx context.Context, stream jetstream.Stream, subject string) ([]keptEvent, error) {
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		HeadersOnly:    true,
		// Gone by itself should its deletion below fail.
		InactiveThreshold: 5 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer func() {
		it.Stop()
		// The consumer is not needed any more: delete it rather than let
		// it linger among the feeds' consumers.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if info := cons.CachedInfo(); info != nil {
			_ = stream.DeleteConsumer(dctx, info.Name)
		}
	}()
	var kept []keptEvent
	for {
		msg, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, err
		}
		meta, err := msg.Metadata()
		if err != nil {
			return nil, err
		}
		size, _ := strconv.Atoi(msg.Headers().Get(nats.MsgSize))
		seq, _ := strconv.ParseUint(msg.Headers().Get(seqHeader), 10, 64)
		kept = append(kept, keptEvent{stream: meta.Sequence.Stream, size: storedSize(subject, seq, size)})
		if meta.Sequence.Stream >= last.Sequence || meta.NumPending == 0 {
			return kept, nil
		}
	}
}

func (g *budget) openStream(ctx context.Context) (jetstream.Stream, error) {
	g.mu.Lock()
	s := g.stream
	g.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := g.js.Stream(ctx, StreamName)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.stream = s
	g.mu.Unlock()
	return s, nil
}

// dropStream makes the next trim open the stream again (its leader may
// have moved).
func (g *budget) dropStream() {
	g.mu.Lock()
	g.stream = nil
	g.mu.Unlock()
}
