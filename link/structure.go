package link

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/tabletop-relay/relay/world"
)

// The module answers `structure` in a shape of its own (reference §4.5):
// folders keyed by name with their sub-folders as further keys, documents
// outside folders grouped by type. It reads the types from `types` or
// else `type`, which in its flat request is always "structure", so a
// request without `types` lists nothing. The relay always sends the types
// and builds the specification's shape (see world.Engine.Structure) from
// the module's tree, the documents' data (asked with `includeEntityData`,
// for their image and order) and the folders' own documents (for their
// names, order and parents).

// structureTypes are the types listed when the caller names none, as the
// embedded world lists them.
var structureTypes = []string{"Actor", "Item", "Scene", "JournalEntry", "Macro"}

// Limits on a linked structure.
const (
	// defaultStructureDepth is how many folder levels a recursive
	// structure descends when no depth is given.
	defaultStructureDepth = 5
	// maxStructureFolders bounds the folders one structure reads.
	maxStructureFolders = 2000
	// folderReads is how many folder documents are read at once.
	folderReads = 4
)

// Structure implements [world.Folders] with the module's `structure`,
// answered in the specification's shape.
func (w *Linked) Structure(ctx context.Context, user *world.User, p world.StructureParams) (world.Document, error) {
	types := p.Types
	if len(types) == 0 {
		types = structureTypes
	}
	depth := 1
	switch {
	case p.Depth < 0:
		return nil, world.Errorf(world.ErrInvalid, "'recursiveDepth' must be a positive number")
	case !p.Recursive:
	case p.Depth == 0:
		depth = defaultStructureDepth
	default:
		depth = p.Depth
	}
	container := ""
	if p.Path != "" {
		id, ok := strings.CutPrefix(p.Path, "Folder.")
		if !ok || id == "" || strings.ContainsAny(id, "./") {
			return nil, world.Errorf(world.ErrInvalid, "Invalid folder path: %s", p.Path)
		}
		container = id
	}
	params := func() map[string]any {
		m := map[string]any{"types": types, "includeEntityData": true, "recursive": true, "recursiveDepth": depth + 1}
		param(m, "path", p.Path)
		return m
	}
	r, err := w.request(ctx, user, "structure", params())
	if err != nil {
		return nil, err
	}
	var tree map[string]any
	if err := r.decode("data", &tree); err != nil || tree == nil {
		return nil, badReply(w.clientID, "structure", "no data")
	}
	b := &linkedStructure{types: types, includeData: p.IncludeData, depth: depth, nodes: map[string]map[string]any{}}
	rootFolders, _ := tree["folders"].(map[string]any)
	b.walk(rootFolders, true)
	if len(b.nodes) > maxStructureFolders {
		return nil, world.Errorf(world.ErrUnavailable, "The world has more than %d folders to list", maxStructureFolders)
	}
	if err := b.readFolders(ctx, w, container); err != nil {
		return nil, err
	}
	if user != nil && !user.IsGM() {
		// A document a player sees only in part comes as a summary without
		// its place in the order: the game master's view has it.
		r, err := w.request(ctx, nil, "structure", params())
		if err != nil {
			return nil, err
		}
		var gmTree any
		_ = r.decode("data", &gmTree)
		b.sorts = map[string]any{}
		collectSorts(gmTree, b.sorts)
	}
	var rootEntities []any
	switch v := tree["entities"].(type) {
	case []any: // inside a folder: a list
		rootEntities = b.entities(v, b.folderType(container))
	case map[string]any: // at the root: grouped by type
		for key, list := range v {
			items, _ := list.([]any)
			rootEntities = append(rootEntities, b.entities(items, b.typeOfGroup(key))...)
		}
	}
	if rootEntities == nil {
		rootEntities = []any{}
	}
	sortEntries(rootEntities)
	return world.Document{"folders": b.folderList(rootFolders, 1), "entities": rootEntities}, nil
}

// linkedStructure builds one Structure answer from the module's tree.
type linkedStructure struct {
	types       []string
	includeData bool
	depth       int
	// nodes are the module's folder nodes by id.
	nodes map[string]map[string]any
	// sorts are the documents' `sort` by id, for the entries that lack it.
	sorts map[string]any
	// docs are the folders' own documents, by id.
	mu   sync.Mutex
	docs map[string]world.Document
}

// folderKeys are the keys of a module's folder node that are not
// sub-folders.
var folderKeys = map[string]bool{"id": true, "uuid": true, "type": true, "entities": true}

// subFolders returns the sub-folder nodes of a module's folder node (or
// of its top-level `folders`).
func subFolders(node map[string]any, top bool) []map[string]any {
	var out []map[string]any
	for k, v := range node {
		if !top && folderKeys[k] {
			continue
		}
		if sub, ok := v.(map[string]any); ok {
			if id, _ := sub["id"].(string); id != "" {
				out = append(out, sub)
			}
		}
	}
	return out
}

// walk records each folder node below node.
func (b *linkedStructure) walk(node map[string]any, top bool) {
	for _, sub := range subFolders(node, top) {
		id, _ := sub["id"].(string)
		if _, seen := b.nodes[id]; seen {
			continue
		}
		b.nodes[id] = sub
		b.walk(sub, false)
	}
}

// collectSorts records the `sort` of every document's full data in v.
func collectSorts(v any, into map[string]any) {
	switch v := v.(type) {
	case map[string]any:
		if id, ok := v["_id"].(string); ok {
			into[id] = v["sort"]
			return
		}
		for _, x := range v {
			collectSorts(x, into)
		}
	case []any:
		for _, x := range v {
			collectSorts(x, into)
		}
	}
}

// readFolders reads the folders' own documents, a few at a time, as the
// game master: the structure already holds only what the user may see.
func (b *linkedStructure) readFolders(ctx context.Context, w *Linked, container string) error {
	b.docs = map[string]world.Document{}
	ids := make(chan string)
	errs := make(chan error, folderReads)
	var wg sync.WaitGroup
	for range folderReads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				doc, err := w.Get(ctx, nil, "Folder."+id)
				if err != nil {
					errs <- err
					for range ids {
					}
					return
				}
				b.mu.Lock()
				b.docs[id] = doc
				b.mu.Unlock()
			}
		}()
	}
	if container != "" {
		ids <- container
	}
	for id := range b.nodes {
		if id != container {
			ids <- id
		}
	}
	close(ids)
	wg.Wait()
	close(errs)
	return <-errs
}

// folderType is the document type a folder holds.
func (b *linkedStructure) folderType(id string) string {
	if doc := b.docs[id]; doc != nil {
		if t, _ := doc["type"].(string); t != "" {
			return t
		}
	}
	t, _ := b.nodes[id]["type"].(string)
	return t
}

// typeOfGroup is the document type of one of the module's groups of
// documents outside folders (`actors`, `journalentrys`).
func (b *linkedStructure) typeOfGroup(key string) string {
	for _, t := range b.types {
		if strings.ToLower(t)+"s" == key {
			return t
		}
	}
	return ""
}

// folderList lists the folders of one level of the module's tree (the
// top-level `folders` when level is 1) in the specification's shape.
func (b *linkedStructure) folderList(node map[string]any, level int) []any {
	subs := subFolders(node, level == 1)
	out := make([]any, 0, len(subs))
	for _, sub := range subs {
		id, _ := sub["id"].(string)
		doc := b.docs[id]
		var parent any
		if p, _ := doc["folder"].(string); p != "" {
			parent = p
		}
		f := world.Document{"id": id, "uuid": "Folder." + id, "name": doc["name"], "type": b.folderType(id), "parentFolder": parent,
			"sort": doc["sort"]}
		if level < b.depth {
			f["folders"] = b.folderList(sub, level+1)
		} else {
			f["folders"] = []any{}
		}
		items, _ := sub["entities"].([]any)
		entities := b.entities(items, b.folderType(id))
		sortEntries(entities)
		f["entities"] = entities
		out = append(out, f)
	}
	sortEntries(out)
	for _, f := range out {
		delete(f.(world.Document), "sort")
	}
	return out
}

// entities converts the module's document entries: with includeData the
// full data plus uuid (for documents the user observes), otherwise the
// summary `{uuid, id, name, type, img}`. An entry without `_id` is the
// module's summary of a document the user sees only in part. Each entry
// keeps its `sort` under a key sortEntries removes.
func (b *linkedStructure) entities(items []any, docType string) []any {
	out := make([]any, 0, len(items))
	for _, it := range items {
		m, _ := it.(map[string]any)
		if m == nil {
			continue
		}
		id, full := m["_id"].(string)
		if !full {
			id, _ = m["id"].(string)
		}
		uuid, _ := m["uuid"].(string)
		if uuid == "" {
			uuid = docType + "." + id
		}
		if full && b.includeData {
			doc := world.Document(m)
			doc["uuid"] = uuid
			out = append(out, sortable{doc, m["sort"]})
			continue
		}
		img, ok := m["img"]
		if !ok {
			img = nil
		}
		sort, ok := m["sort"]
		if !ok {
			sort = b.sorts[id]
		}
		out = append(out, sortable{world.Document{"uuid": uuid, "id": id, "name": m["name"], "type": docType, "img": img}, sort})
	}
	return out
}

// sortable is a listed entry with the `sort` it is ordered by.
type sortable struct {
	doc  world.Document
	sort any
}

// sortEntries orders entries (sortable or folder documents holding
// `sort`) by their `sort` number, then name, then id, as the embedded
// world does, and unwraps them.
func sortEntries(list []any) {
	key := func(v any) (float64, string, string) {
		var doc world.Document
		var s any
		switch e := v.(type) {
		case sortable:
			doc, s = e.doc, e.sort
		case world.Document:
			doc, s = e, e["sort"]
		}
		n, _ := s.(float64)
		name, _ := doc["name"].(string)
		id, _ := doc["id"].(string)
		if id == "" {
			id, _ = doc["_id"].(string)
		}
		return n, name, id
	}
	slices.SortStableFunc(list, func(a, b any) int {
		na, sa, ia := key(a)
		nb, sb, ib := key(b)
		return cmp.Or(cmp.Compare(na, nb), cmp.Compare(sa, sb), cmp.Compare(ia, ib))
	})
	for i, v := range list {
		if e, ok := v.(sortable); ok {
			list[i] = e.doc
		}
	}
}
