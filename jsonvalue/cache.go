package jsonvalue

import (
	"bytes"
	"hash/maphash"
	"sync"
)

// The transcoded cache: gRPC callers who read the same large document
// again and again (a dashboard polling an actor, a bot reading its
// character) get the very JSON text from the world each time, the world's
// cached serialisation of that version of the document. Externalize keeps
// the Value encoding of the larger texts it transcoded, so that the next
// read of the same text costs a lookup and a copy instead of a transcoding
// (about 60 µs for an 18 KB actor).
//
// An entry is found by a hash of the text, and is used only when its own
// copy of the text equals the text at hand, so two texts with the same
// hash never get each other's encoding. What the cache holds is bounded by cacheLimit bytes (texts and
// encodings together), the oldest entries going first.
const (
	// cacheMinText is the shortest text worth keeping: below it,
	// transcoding costs about as much as the lookup and the copies.
	cacheMinText = 2 << 10
	// cacheLimit bounds the bytes the cache holds: some two hundred 18 KB
	// actors.
	cacheLimit = 16 << 20
)

// cacheKey identifies a text by its hash and length.
type cacheKey struct {
	hash uint64
	n    int
}

// cacheSeed seeds the hashes: chosen at random when the process starts,
// so callers cannot make texts collide on purpose (and a collision would
// only cost a transcoding).
var cacheSeed = maphash.MakeSeed()

func keyOf(text []byte) cacheKey {
	return cacheKey{maphash.Bytes(cacheSeed, text), len(text)}
}

// cacheEntry is one text (a copy) and its Value encoding.
type cacheEntry struct {
	text []byte
	wire []byte
}

// wireCache remembers the Value encodings of texts; safe for concurrent
// use. A nil cache holds nothing.
type wireCache struct {
	mu      sync.Mutex
	entries map[cacheKey]cacheEntry
	order   []cacheKey // oldest first
	bytes   int
	limit   int
}

// transcoded is the process's cache, shared by every response encoded for
// a gRPC caller.
var transcoded = &wireCache{entries: map[cacheKey]cacheEntry{}, limit: cacheLimit}

// get returns the Value encoding of text when the cache holds it, and the
// text's key for put. The encoding must not be changed.
func (c *wireCache) get(text []byte) ([]byte, cacheKey, bool) {
	if c == nil || len(text) < cacheMinText {
		return nil, cacheKey{}, false
	}
	key := keyOf(text)
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if !ok || !bytes.Equal(e.text, text) {
		return nil, key, false
	}
	return e.wire, key, true
}

// put keeps copies of a text and its Value encoding under the key get
// gave.
func (c *wireCache) put(key cacheKey, text, wire []byte) {
	if c == nil || len(text) < cacheMinText || len(text)+len(wire) > c.limit/4 {
		return
	}
	e := cacheEntry{text: bytes.Clone(text), wire: bytes.Clone(wire)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok {
		c.bytes -= len(old.text) + len(old.wire)
	} else {
		c.order = append(c.order, key)
	}
	c.entries[key] = e
	c.bytes += len(e.text) + len(e.wire)
	for c.bytes > c.limit && len(c.order) > 0 {
		oldest := c.order[0]
		c.order = c.order[1:]
		if old, ok := c.entries[oldest]; ok {
			c.bytes -= len(old.text) + len(old.wire)
			delete(c.entries, oldest)
		}
	}
}
