package events

import (
	"sync/atomic"
	"time"
)

// A world's dispatcher hands each published event to the subscriptions of
// its channel and wakes their readers. Writes, not events, are what fan-out
// costs (a system call each, and a wakeup of the reader on the other end),
// so a reader should write everything waiting at once, as seldom as keeps
// delivery prompt. The fanOut does that by waking readers in a cycle:
//
//   - New events are queued to every subscription that wants them as soon
//     as the coalescing window after the first one has passed; a
//     subscription given events joins the end of the wake list unless it
//     is on it already.
//   - Readers are woken from the front of the list in waves of waveSize,
//     each once nearly all of the previous waves have taken their events
//     (or after waveWait). Go's scheduler runs runnable goroutines first come, first
//     served, so ten thousand readers woken at once would make every other
//     goroutine of the process (the world's writers among them) wait for
//     all of them to write; waves keep that wait to one wave's.
//   - A pushed subscription's reader is no goroutine of its own: waking it
//     hands it to one of the hub's writer goroutines (push.go), which
//     writes everything queued for it at once. The waves then pace the
//     writers the same way, and no goroutine is woken per subscriber.
//
// With few subscribers the list empties at once and each event goes out
// after the coalescing window. With many, a reader is woken about once per
// cycle through the list and writes all the events queued until then:
// writes per second stay bounded by what the machine can do while events
// come faster, and an event waits at most about one cycle.
type fanOut struct {
	s    *stream
	done uint64 // the last event queued to subscriptions
	// list are the subscriptions with events whose readers are to be
	// woken, in order, from head on; a subscription is on it at most once
	// (Subscription.listed).
	list []*Subscription
	head int

	// inFlight counts the readers woken that have not taken their events
	// yet; drained gets a token when it falls to target.
	inFlight atomic.Int64
	target   atomic.Int64
	drained  chan struct{}

	byChannel map[Channel][]*event
	timer     *time.Timer
}

const (
	// waveSize is how many readers are woken together.
	waveSize = 128
	// waveTarget is how many readers of the waves woken so far may still
	// hold their events when the next wave is woken. Near 0, the run
	// queues empty between waves, and the process's other goroutines (a
	// world's writers) get their turn; above 0, a few stalled readers do
	// not make every wave wait for waveWait.
	waveTarget = waveSize / 16
	// waveWait bounds how long a wave waits for the previous one.
	waveWait = 5 * time.Millisecond
)

func newFanOut(s *stream, done uint64) *fanOut {
	f := &fanOut{s: s, done: done, drained: make(chan struct{}, 1), byChannel: map[Channel][]*event{}, timer: time.NewTimer(time.Hour)}
	f.timer.Stop()
	return f
}

// run hands out events until the hub closes.
func (f *fanOut) run() {
	closed := f.s.hub.closed
	coalesce := f.s.hub.opts.Coalesce
	var pending time.Time // when unqueued events were first announced
	for {
		idle := f.head == len(f.list)
		if idle {
			clear(f.list)
			f.list, f.head = f.list[:0], 0
		}
		if pending.IsZero() {
			if idle {
				select {
				case <-closed:
					return
				case <-f.s.gone:
					return
				case <-f.s.wakeup:
					pending = time.Now()
				}
			} else {
				select {
				case <-f.s.wakeup:
					pending = time.Now()
				default:
				}
			}
		}
		if !pending.IsZero() {
			wait := coalesce - time.Since(pending)
			if idle && wait > 0 {
				if !f.sleep(wait, false) {
					return
				}
				wait = 0
			}
			if wait <= 0 {
				pending = time.Time{}
				f.collect()
			}
		}
		if f.head == len(f.list) {
			continue
		}
		f.wakeWave()
		if !f.sleep(waveWait, true) {
			return
		}
	}
}

// sleep waits for d, for the drained token when forWave is set and the
// wave has not been taken yet, or for the hub to close (false).
func (f *fanOut) sleep(d time.Duration, forWave bool) bool {
	var drained <-chan struct{}
	if forWave {
		f.target.Store(waveTarget)
		if f.inFlight.Load() <= waveTarget {
			return true
		}
		drained = f.drained
	}
	f.timer.Reset(d)
	defer f.timer.Stop()
	select {
	case <-f.s.hub.closed:
		return false
	case <-drained:
	case <-f.timer.C:
	}
	return true
}

// collect queues the events published since the last time to the
// subscriptions that want them and lists those to wake.
func (f *fanOut) collect() {
	s := f.s
	s.mu.Lock()
	lost := s.ring.n > 0 && s.ring.oldest() > f.done+1
	evs := s.ring.after(f.done)
	f.done = s.head
	s.ring.handedOut(f.done)
	if s.dirty {
		s.snapshot = groupByClass(s.subs)
		s.dirty = false
	}
	groups := s.snapshot
	s.mu.Unlock()
	if lost {
		// The ring moved past events this dispatcher never handed out:
		// every subscriber missed some and must resume.
		for _, list := range groups {
			for _, g := range list {
				for _, sub := range g.subs {
					sub.overflow()
				}
			}
		}
	}
	clear(f.byChannel)
	for _, ev := range evs {
		f.byChannel[ev.Channel] = append(f.byChannel[ev.Channel], ev)
	}
	delivered := 0
	for ch, list := range f.byChannel {
		for _, g := range groups[ch] {
			// What a class receives is worked out once, by any of its
			// subscriptions, and shared by all of them.
			out := g.subs[0].deliverableOf(list)
			if len(out) == 0 {
				continue
			}
			for _, sub := range g.subs {
				if n := sub.offer(out); n > 0 {
					delivered += n
					if !sub.listed {
						sub.listed = true
						f.list = append(f.list, sub)
					}
				}
			}
		}
	}
	// One count per round rather than per subscriber.
	s.hub.stats.delivered.Add(uint64(delivered))
}

// classGroup is the subscriptions of one class (see filterClass): they
// receive the same events.
type classGroup struct {
	subs []*Subscription
}

// groupByClass lists a stream's subscriptions by channel and class, for
// the dispatcher.
func groupByClass(subs map[Channel]map[*Subscription]struct{}) map[Channel][]classGroup {
	out := make(map[Channel][]classGroup, len(subs))
	index := map[filterClass]int{}
	for ch, set := range subs {
		var groups []classGroup
		for sub := range set {
			i, ok := index[sub.class]
			if !ok {
				i = len(groups)
				index[sub.class] = i
				groups = append(groups, classGroup{})
			}
			groups[i].subs = append(groups[i].subs, sub)
		}
		out[ch] = groups
		clear(index)
	}
	return out
}

// wakeWave wakes the readers of the next wave of the list.
func (f *fanOut) wakeWave() {
	end := min(f.head+waveSize, len(f.list))
	for i, sub := range f.list[f.head:end] {
		sub.listed = false
		sub.wake(f)
		f.list[f.head+i] = nil
	}
	f.head = end
}

// took counts a woken reader that took its events (or will never take
// them).
func (f *fanOut) took() {
	if f.inFlight.Add(-1) == f.target.Load() {
		select {
		case f.drained <- struct{}{}:
		default:
		}
	}
}
