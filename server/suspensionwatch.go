package server

import (
	"sync"
	"time"
)

// suspensionWatch ends the open event streams of accounts that get
// suspended. One goroutine, running while any stream is watched, looks at
// each watched account once per suspensionCheckEvery, however many of its
// streams are open: an idle stream costs a map entry, not a goroutine.
type suspensionWatch struct {
	accounts interface{ Suspension(accountID string) error }
	every    time.Duration

	mu      sync.Mutex
	watched map[string]map[*suspensionWatcher]struct{}
	running bool
}

// suspensionWatcher is one watched stream: end is called, once, with the
// suspension's refusal.
type suspensionWatcher struct {
	end func(error)
}

// watch calls end with the suspension's refusal once the account is
// suspended, unless the returned stop was called first.
func (w *suspensionWatch) watch(account string, end func(error)) (stop func()) {
	entry := &suspensionWatcher{end: end}
	w.mu.Lock()
	if w.watched == nil {
		w.watched = map[string]map[*suspensionWatcher]struct{}{}
	}
	set := w.watched[account]
	if set == nil {
		set = map[*suspensionWatcher]struct{}{}
		w.watched[account] = set
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
		if set := w.watched[account]; set != nil {
			delete(set, entry)
			if len(set) == 0 {
				delete(w.watched, account)
			}
		}
	}
}

// run checks the watched accounts until none is left.
func (w *suspensionWatch) run() {
	t := time.NewTicker(w.every)
	defer t.Stop()
	var accounts []string
	for range t.C {
		w.mu.Lock()
		if len(w.watched) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		accounts = accounts[:0]
		for a := range w.watched {
			accounts = append(accounts, a)
		}
		w.mu.Unlock()
		for _, a := range accounts {
			err := w.accounts.Suspension(a)
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
