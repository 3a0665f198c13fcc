package link

import "sync"

// envelopeDepth is how many levels of nesting a module's message adds
// around the documents it carries (the message, its `data`, a list of
// results, a result holding the document): a linked world's messages may
// nest this much deeper than a document the embedded worlds accept.
const envelopeDepth = 4

// tooDeep reports whether the JSON text data nests objects and arrays
// more than limit levels deep, the outermost value counting as the first.
// It scans the bytes without decoding them, so that a reply or event
// nested thousands of levels deep costs no more than a flat one of its
// size; malformed JSON is left to the decoder.
func tooDeep(data []byte, limit int) bool {
	depth := 0
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > limit {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// byteBudget is a weighted semaphore of bytes: holders take what they
// need, waiting while others hold the rest, and give it back. One holder
// may take more than the whole budget when nobody else holds any, so that
// nothing waits forever. After close nothing waits any more.
type byteBudget struct {
	mu     sync.Mutex
	room   *sync.Cond
	held   int64
	limit  int64
	closed bool
}

func (b *byteBudget) init(limit int64) {
	b.limit = limit
	b.room = sync.NewCond(&b.mu)
}

// acquire takes n bytes, waiting for room unless the budget is closed.
func (b *byteBudget) acquire(n int64) *budgetHold {
	b.mu.Lock()
	defer b.mu.Unlock()
	for b.held > 0 && b.held+n > b.limit && !b.closed {
		b.room.Wait()
	}
	b.held += n
	return &budgetHold{b: b, n: n}
}

// close lets every waiter go on: the connection is gone.
func (b *byteBudget) close() {
	b.mu.Lock()
	b.closed = true
	b.room.Broadcast()
	b.mu.Unlock()
}

// budgetHold is what one holder took of a byteBudget.
type budgetHold struct {
	b    *byteBudget
	once sync.Once
	n    int64
}

// release gives the hold back; only the first call counts, and a nil hold
// holds nothing.
func (h *budgetHold) release() {
	if h == nil {
		return
	}
	h.once.Do(func() {
		h.b.mu.Lock()
		h.b.held -= h.n
		h.b.room.Broadcast()
		h.b.mu.Unlock()
	})
}
