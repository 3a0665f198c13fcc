package server

import (
	"sync"
	"time"
)

// endWatch ends open event streams once what they were opened with ends:
// the account that got suspended, the console session that was signed out
// or expired. One goroutine, running while any stream is watched, checks
// each watched id (an account, a session's key) once per every, however
// many of its streams are open: an idle stream costs a map entry, not a
// goroutine.
type endWatch struct {
	// check answers the refusal that ends the id's streams, or nil while
	// they may go on.
	check func(id string) error
	every time.Duration

	mu      sync.Mutex
	watched map[string]map[*endWatcher]struct{}
	running bool
}

// endWatcher is one watched stream: end is called, once, with the
// refusal that ended it.
type endWatcher struct {
	end func(error)
}

// watch calls end with check's refusal once check refuses id, unless the
// returned stop was called first.
func (w *endWatch) watch(id string, end func(error)) (stop func()) {
	entry := &endWatcher{end: end}
	w.mu.Lock()
	if w.watched == nil {
		w.watched = map[string]map[*endWatcher]struct{}{}
	}
	set := w.watched[id]
	if set == nil {
		set = map[*endWatcher]struct{}{}
		w.watched[id] = set
	}
	set[entry] = struct{}{}
	if !w.running {
		w.running = true
		go w.run()
	}
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.watched[id]; set != nil {
			delete(set, entry)
			if len(set) == 0 {
				delete(w.watched, id)
			}
		}
	}
}

// run checks the watched ids until none is left.
func (w *endWatch) run() {
	t := time.NewTicker(w.every)
	defer t.Stop()
	var ids []string
	for range t.C {
		w.mu.Lock()
		if len(w.watched) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		ids = ids[:0]
		for a := range w.watched {
			ids = append(ids, a)
		}
		w.mu.Unlock()
		for _, a := range ids {
			err := w.check(a)
			if err == nil {
				continue
			}
			w.mu.Lock()
			set := w.watched[a]
			delete(w.watched, a)
			w.mu.Unlock()
			for entry := range set {
				entry.end(err)
			}
		}
	}
}
