package link

import (
	"context"
	"encoding/json"
	"slices"
	"time"

	"github.com/tabletop-relay/relay/world"
)

// The module does not filter its events by permission, and most of its
// messages do not say who may read the document they are about (an actor
// event carries the changes, not the actor's ownership). The relay decides
// for each non-GM subscriber with what it knows:
//
//   - the ownership a payload carries (a hook's document);
//   - the ownership of the document when the relay has seen it: in an
//     earlier event, or, while players follow the world's events, in a
//     reply of the module to any caller (`entity`, `update`, `create`),
//     kept per world in a bounded table (knownDocs);
//   - an update's changes to the ownership, applied to what it knew;
//   - when a player follows the channel and the relay knows nothing of
//     the document, the module's answer to an `entity` request made as a
//     GM (once per document, within fetchTimeout; the world's events wait
//     meanwhile, in order);
//   - the users' roles from the module's `player-list` (GMs read
//     everything).
//
// Where it still cannot decide (the module cannot find the document, or
// does not answer), the subscriber does not get the event, and the miss is
// counted (Events.Undecided).

// DefaultKnownDocuments is how many documents' ownership each linked world
// keeps for deciding who may read its events.
const DefaultKnownDocuments = 4096

// knownDocs is a bounded table of top-level uuid → access fields; the
// oldest entry goes first when it is full.
type knownDocs struct {
	docs  map[string]world.Document
	order []string // insertion order, oldest first
}

// get returns the access fields of uuid, or nil.
func (k *knownDocs) get(uuid string) world.Document {
	if uuid == "" {
		return nil
	}
	return k.docs[uuid]
}

// put records the access fields of uuid.
func (k *knownDocs) put(uuid string, access world.Document) {
	if uuid == "" || access == nil {
		return
	}
	if k.docs == nil {
		k.docs = map[string]world.Document{}
	}
	if _, ok := k.docs[uuid]; !ok {
		if len(k.docs) >= DefaultKnownDocuments {
			// Drop the oldest entries still in the table (entries
			// forgotten earlier may still sit in order).
			for len(k.order) > 0 && len(k.docs) >= DefaultKnownDocuments {
				delete(k.docs, k.order[0])
				k.order = k.order[1:]
			}
		}
		k.order = append(k.order, uuid)
	}
	k.docs[uuid] = access
	if len(k.order) > 2*DefaultKnownDocuments {
		// Compact the order of forgotten entries.
		live := k.order[:0]
		for _, u := range k.order {
			if _, ok := k.docs[u]; ok {
				live = append(live, u)
			}
		}
		k.order = live
	}
}

// forget drops uuid (a deleted document).
func (k *knownDocs) forget(uuid string) { delete(k.docs, uuid) }

// unknown returns the uuids of the documents the event's read rules need
// and the relay does not know.
func (le *linkedEvent) unknown() []string {
	var out []string
	if le.access == nil && le.accessUUID != "" {
		out = append(out, le.accessUUID)
	}
	for _, p := range le.parts {
		if p.owner == nil && p.ownerUUID != "" && !slices.Contains(out, p.ownerUUID) {
			out = append(out, p.ownerUUID)
		}
	}
	return out
}

// fill takes what known now holds of the documents the event needs.
func (le *linkedEvent) fill(known *knownDocs) {
	if le.access == nil {
		le.access = known.get(le.accessUUID)
	}
	for i := range le.parts {
		if p := &le.parts[i]; p.owner == nil {
			p.owner = known.get(p.ownerUUID)
		}
	}
}

// fetchTimeout bounds the wait for the module's answer when the relay asks
// who may read a document: the world's events wait meanwhile.
const fetchTimeout = 5 * time.Second

// fetch asks the module for a top-level document, as a GM, and keeps its
// ownership (see Observe). A failure leaves the document unknown.
func (e *Events) fetch(clientID, uuid string) {
	doc := e.fetchDoc(clientID, uuid)
	if doc == nil {
		return
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return
	}
	if access := observed(uuid, b); access != nil {
		// The world's goroutine waits for this: at once, not queued.
		e.mu.Lock()
		e.world(clientID).known.put(uuid, access)
		e.mu.Unlock()
	}
}

// fetchDoc asks the module for a document, as a GM (within fetchTimeout);
// nil when it has none or does not answer.
func (e *Events) fetchDoc(clientID, uuid string) world.Document {
	ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
	defer cancel()
	raw, err := e.hub.Call(ctx, clientID, "entity", map[string]any{"uuid": uuid, "data": map[string]any{}})
	if err != nil {
		return nil
	}
	var reply struct {
		Data world.Document `json:"data"`
	}
	if json.Unmarshal(raw, &reply) != nil || reply.Data == nil {
		return nil
	}
	e.fetched.Add(1)
	return reply.Data
}

// noteRound records the last round seen of a combat (bounded like the
// known documents).
func (w *worldEvents) noteRound(id string, round any) {
	if w.lastRound == nil {
		w.lastRound = map[string]any{}
	}
	if _, ok := w.lastRound[id]; !ok && len(w.lastRound) >= DefaultKnownDocuments {
		clear(w.lastRound)
	}
	w.lastRound[id] = round
}

// Observe records what a module's reply shows of a top-level document of
// a linked world: its uuid and the fields that decide who may read it,
// when the document carries its `ownership`. Linked worlds call it with
// the documents the module returns, so that later events about them can
// be judged for players. It takes effect in order with the world's event
// messages: the module sends the events of a change before its reply, and
// those are judged by the document as it was before the reply.
func (e *Events) Observe(clientID, uuid string, doc json.RawMessage) {
	if e == nil {
		return
	}
	if typ, top := topOf(uuid); top != uuid || typ == "" {
		return
	}
	// Only players' streams need it: reading a large document costs, and
	// a relay whose linked worlds no player follows pays nothing.
	e.mu.Lock()
	w := e.worlds[clientID]
	players := w != nil && w.hasAnyPlayer()
	e.mu.Unlock()
	if !players {
		return
	}
	access := observed(uuid, doc)
	if access == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(w.inbox) >= DefaultEventInbox {
		return
	}
	w.inbox = append(w.inbox, inboxItem{seenUUID: uuid, seenAccess: access})
	e.startWork(clientID, w)
}

// hasAnyPlayer reports whether a subscriber who is not a GM follows any
// of the world's channels; e.mu is held.
func (w *worldEvents) hasAnyPlayer() bool {
	for s := range w.subs {
		if !s.user.IsGM() {
			return true
		}
	}
	return false
}

// observed returns the access fields of a top-level document that carries
// its ownership, else nil. Only those fields are decoded.
func observed(uuid string, doc json.RawMessage) world.Document {
	if typ, top := topOf(uuid); top != uuid || typ == "" {
		return nil
	}
	var f struct {
		ID        *string        `json:"_id"`
		Ownership map[string]any `json:"ownership"`
		Author    any            `json:"author"`
		User      any            `json:"user"`
		Whisper   any            `json:"whisper"`
		Blind     any            `json:"blind"`
	}
	if json.Unmarshal(doc, &f) != nil || f.Ownership == nil {
		return nil
	}
	out := world.Document{"ownership": f.Ownership}
	if f.ID != nil {
		out["_id"] = *f.ID
	}
	for k, v := range map[string]any{"author": f.Author, "user": f.User, "whisper": f.Whisper, "blind": f.Blind} {
		if v != nil {
			out[k] = v
		}
	}
	return out
}

// observeDoc is Observe for a decoded document.
func (e *Events) observeDoc(clientID, uuid string, doc world.Document) {
	if e == nil || doc == nil || asMap(doc["ownership"]) == nil {
		return
	}
	if typ, top := topOf(uuid); top != uuid || typ == "" {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	w := e.worlds[clientID]
	if w == nil || !w.hasAnyPlayer() || len(w.inbox) >= DefaultEventInbox {
		return
	}
	w.inbox = append(w.inbox, inboxItem{seenUUID: uuid, seenAccess: accessOf(doc)})
	e.startWork(clientID, w)
}
