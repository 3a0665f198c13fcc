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

// headScanner finds the `type` and `requestId` of a JSON object message
// as its bytes stream through it, wherever they stand among its members,
// holding nothing but the current top-level string (up to maxHeadString
// bytes): it tells what a message too large to keep was.
type headScanner struct {
	depth             int
	inString, escaped bool
	// str collects a top-level string; long is set when it passed
	// maxHeadString, odd when it holds an escape (no such value is read).
	str       []byte
	long, odd bool
	// key is the member being read, once its colon passed (value set).
	key   string
	value bool
	typ   string
	id    string
}

// maxHeadString bounds the strings headScanner keeps.
const maxHeadString = 256

func (h *headScanner) Write(p []byte) (int, error) {
	for _, b := range p {
		if h.inString {
			switch {
			case h.escaped:
				h.escaped = false
			case b == '\\':
				h.escaped, h.odd = true, true
			case b == '"':
				h.inString = false
				h.endString()
				continue
			}
			if h.depth == 1 {
				if len(h.str) < maxHeadString {
					h.str = append(h.str, b)
				} else {
					h.long = true
				}
			}
			continue
		}
		switch b {
		case '"':
			h.inString = true
			h.str, h.long, h.odd = h.str[:0], false, false
		case '{', '[':
			h.depth++
		case '}', ']':
			h.depth--
		case ':':
			h.value = h.depth == 1
		case ',':
			if h.depth == 1 {
				h.key, h.value = "", false
			}
		}
	}
	return len(p), nil
}

// endString takes a top-level string that just ended: a member's key, or
// the value of `type` or `requestId`.
func (h *headScanner) endString() {
	if h.depth != 1 {
		return
	}
	s := ""
	if !h.long && !h.odd {
		s = string(h.str)
	}
	if !h.value {
		h.key = s
		return
	}
	switch {
	case h.key == "type" && h.typ == "":
		h.typ = s
	case h.key == "requestId" && h.id == "":
		h.id = s
	}
	h.value = false
}
