package world

// docTable holds the top-level documents of one type by id. Like the
// snapshot it belongs to, it is never changed once built: a commit makes a
// new table that shares all of the old one but the shards it touched. The
// documents are spread over shards so that a commit copies a small shard
// rather than every id of its type (a world piles up chat messages: with a
// single map, each new one would copy all the others).
type docTable struct {
	shards [tableShards]map[string]Document // nil: empty shard
	n      int
}

// tableShards is the number of shards of a table: a power of two.
const tableShards = 64

// shardOf spreads ids over the shards (FNV-1a).
func shardOf(id string) int {
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h & (tableShards - 1))
}

// newDocTable builds a table from a map of documents by id.
func newDocTable(docs map[string]Document) *docTable {
	t := &docTable{}
	for id, doc := range docs {
		s := shardOf(id)
		if t.shards[s] == nil {
			t.shards[s] = map[string]Document{}
		}
		t.shards[s][id] = doc
	}
	t.n = len(docs)
	return t
}

// get returns the document with an id, or nil. A nil table is empty.
func (t *docTable) get(id string) Document {
	if t == nil {
		return nil
	}
	return t.shards[shardOf(id)][id]
}

// len returns the number of documents.
func (t *docTable) len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// each calls fn with every document until fn returns false, in no
// particular order, and reports whether it went through them all.
func (t *docTable) each(fn func(id string, doc Document) bool) bool {
	if t == nil {
		return true
	}
	for _, shard := range t.shards {
		for id, doc := range shard {
			if !fn(id, doc) {
				return false
			}
		}
	}
	return true
}

// tableEditor makes a new version of a table: the first change to a shard
// copies it, later ones change the copy.
type tableEditor struct {
	t      *docTable
	copied [tableShards]bool
}

// edit starts a new version of t (nil: an empty table).
func edit(t *docTable) *tableEditor {
	next := &docTable{}
	if t != nil {
		*next = *t
	}
	return &tableEditor{t: next}
}

// set stores doc under id; a nil doc removes it.
func (ed *tableEditor) set(id string, doc Document) {
	s := shardOf(id)
	if !ed.copied[s] {
		ed.copied[s] = true
		old := ed.t.shards[s]
		shard := make(map[string]Document, len(old)+1)
		for k, v := range old {
			shard[k] = v
		}
		ed.t.shards[s] = shard
	}
	_, had := ed.t.shards[s][id]
	switch {
	case doc == nil && had:
		delete(ed.t.shards[s], id)
		ed.t.n--
	case doc != nil:
		ed.t.shards[s][id] = doc
		if !had {
			ed.t.n++
		}
	}
}
