package world

import (
	"cmp"
	"context"
	"slices"
	"strings"
)

// defaultStructureDepth is how many folder levels a recursive structure
// descends when no depth is given.
const defaultStructureDepth = 5

// Structure returns the folder tree of the world, or of one folder, as seen
// by user:
//
//	{
//	  "folders":  [ <folder>... ],  // the folders at the top of the tree
//	  "entities": [ <entity>... ]   // the documents outside any folder
//	}
//
// With p.Path (`Folder.<id>`) the tree starts inside that folder: `folders`
// are its sub-folders and `entities` its own documents. Each folder is
//
//	{"id", "uuid", "name", "type", "parentFolder", "folders": [...], "entities": [...]}
//
// where `type` is the document type the folder holds and `parentFolder` its
// parent's id or null. Each entity is a summary `{"uuid", "id", "name",
// "type", "img"}` (`type` being the document name, e.g. "Actor"; `img` null
// when absent), or, with p.IncludeData, the full source data plus `uuid`
// for documents the user may observe.
//
// Only folders and documents of p.Types are listed (default: Actor, Item,
// Scene, JournalEntry, Macro). Without p.Recursive only the first level of
// folders is listed, with their documents; with it the tree goes p.Depth
// levels deep (default 5) and deeper folders are left out. Permissions:
// documents the user cannot see are left out, LIMITED ones are always
// summaries, and for a non-GM a folder appears only when they see it (see
// visibility.go: by its own `ownership` when it has one, else when
// something in its subtree is visible); a path to a folder they do not see
// is refused as a single read of it would be. Folders and documents are sorted by `sort`, then
// name.
func (e *Engine) Structure(ctx context.Context, user *User, p StructureParams) (Document, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	b := &structure{user: user, includeData: p.IncludeData, include: map[string]bool{}}
	types := folderedTypes
	if len(p.Types) > 0 {
		types = nil
		for _, name := range p.Types {
			t := foldered(name)
			if t == nil {
				return nil, Errorf(ErrInvalid, "'types' must name document types among %s, not %s", folderedNames(), name)
			}
			types = append(types, t)
		}
	}
	for _, t := range types {
		b.include[t.name] = true
	}
	switch {
	case p.Depth < 0:
		return nil, Errorf(ErrInvalid, "'recursiveDepth' must be a positive number")
	case !p.Recursive:
		b.depth = 1
	case p.Depth == 0:
		b.depth = defaultStructureDepth
	default:
		b.depth = p.Depth
	}
	v := e.view()
	container := ""
	if p.Path != "" {
		id, ok := strings.CutPrefix(p.Path, typeFolder.name+".")
		if !ok || !validID(id) {
			return nil, Errorf(ErrInvalid, "Invalid folder path: %s", p.Path)
		}
		folder := v.top(docKey{typeFolder, id})
		if folder == nil {
			return nil, Errorf(ErrNotFound, "Folder not found: %s", p.Path)
		}
		if !v.folderVisible(user, folder, map[string]bool{}) {
			return nil, errNoView(user)
		}
		if t := str(folder["type"]); !b.include[t] {
			return nil, Errorf(ErrInvalid, "Folder type %s not included in requested types", t)
		}
		container = id
	}
	b.index(v, types)
	return Document{"folders": b.folderNodes(container, 1), "entities": b.entityList(container)}, nil
}

// structure builds one Structure answer.
type structure struct {
	user        *User
	includeData bool
	include     map[string]bool // document types listed
	depth       int

	folders  map[string]Document   // listed folders by id
	children map[string][]Document // sub-folders by parent id ("" is the root)
	entities map[string][]entity   // visible documents by folder id ("" is the root)
	visible  map[string]bool       // memo of folderVisible
}

// entity is a document the user may see.
type entity struct {
	typ   *docType
	doc   Document
	level Level
}

// index sorts the folders and visible documents of the listed types into
// their folders. A folder or document whose folder does not exist (or is
// not listed) sits at the root.
func (b *structure) index(v *View, types []*docType) {
	b.folders = map[string]Document{}
	b.children = map[string][]Document{}
	b.entities = map[string][]entity{}
	b.visible = map[string]bool{}
	v.each(typeFolder, func(doc Document) bool {
		if b.include[str(doc["type"])] {
			b.folders[str(doc["_id"])] = doc
		}
		return true
	})
	for _, f := range b.folders {
		parent := str(f["folder"])
		if b.folders[parent] == nil {
			parent = ""
		}
		b.children[parent] = append(b.children[parent], f)
	}
	for _, t := range types {
		v.each(t, func(doc Document) bool {
			if level := levelOf(b.user, t, doc); level > LevelNone {
				folder := str(doc["folder"])
				if b.folders[folder] == nil {
					folder = ""
				}
				b.entities[folder] = append(b.entities[folder], entity{t, doc, level})
			}
			return true
		})
	}
}

// folderVisible reports whether the user sees a folder, by the rule of
// View.folderVisible (memoised over the tree being built): GMs see every
// folder; others see a folder by its own `ownership` when it has one, else
// when its subtree holds a document they see.
func (b *structure) folderVisible(id string) bool {
	if b.user.IsGM() {
		return true
	}
	if seen, ok := b.visible[id]; ok {
		return seen
	}
	if f := b.folders[id]; f != nil {
		if _, own := f["ownership"].(map[string]any); own {
			seen := levelOf(b.user, typeFolder, f) >= LevelLimited
			b.visible[id] = seen
			return seen
		}
	}
	b.visible[id] = false // a parent cycle in damaged data ends here
	seen := len(b.entities[id]) > 0 || slices.ContainsFunc(b.children[id], func(f Document) bool {
		return b.folderVisible(str(f["_id"]))
	})
	b.visible[id] = seen
	return seen
}

// folderNodes lists the visible sub-folders of a folder ("" for the root)
// as nodes at the given level of the tree.
func (b *structure) folderNodes(parent string, level int) []any {
	folders := slices.Clone(b.children[parent])
	slices.SortFunc(folders, bySortThenName)
	nodes := []any{}
	for _, f := range folders {
		id := str(f["_id"])
		if !b.folderVisible(id) {
			continue
		}
		sub := []any{}
		if level < b.depth {
			sub = b.folderNodes(id, level+1)
		}
		node := folderSummary(f)
		node["folders"] = sub
		node["entities"] = b.entityList(id)
		nodes = append(nodes, node)
	}
	return nodes
}

// entityList lists the visible documents of a folder ("" for the root).
func (b *structure) entityList(folder string) []any {
	list := slices.Clone(b.entities[folder])
	slices.SortFunc(list, func(x, y entity) int { return bySortThenName(x.doc, y.doc) })
	out := make([]any, len(list))
	for i, en := range list {
		id := str(en.doc["_id"])
		uuid := en.typ.name + "." + id
		if b.includeData && en.level >= LevelObserver {
			out[i] = fullData(uuid, en.doc)
			continue
		}
		img, ok := en.doc["img"]
		if !ok {
			img = nil
		}
		out[i] = Document{"uuid": uuid, "id": id, "name": en.doc["name"], "type": en.typ.name, "img": img}
	}
	return out
}

// bySortThenName orders documents by their `sort` number, then name, then id.
func bySortThenName(a, b Document) int {
	sa, _ := number(a["sort"])
	sb, _ := number(b["sort"])
	return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(docName(a), docName(b)), cmp.Compare(str(a["_id"]), str(b["_id"])))
}

// ModuleStructure reshapes a Structure answer the way the tabletop module's
// own `structure` request answers, for callers moving from the existing
// relay (GET /structure?shape=module):
//
//	{
//	  "folders":  {"<name>": {"id", "uuid", "type", "<sub-folder name>": {...}, "entities": [...]}},
//	  "entities": {"actors": [...], "items": [...], "journalentrys": [...]}
//	}
//
// Folders are keyed by name, or by id when the name is empty, already taken
// at its level, or one of the keys a folder has itself (`id`, `uuid`,
// `type`, `entities`), so that no folder hides another. Documents outside
// any folder are grouped by their document type, lower-cased, plus "s" (the
// module's own naming, hence `journalentrys`); with inFolder (a `path` was
// given) they stay a list, as the module answers. Empty groups (no folders,
// no documents) are left out. Entries are unchanged.
//
// A tree already in the module's shape (a linked world's, which the module
// itself answered) is returned as it is.
func ModuleStructure(tree Document, inFolder bool) Document {
	_, foldersKeyed := tree["folders"].(Document)
	_, entitiesKeyed := tree["entities"].(Document)
	if foldersKeyed || entitiesKeyed {
		return tree
	}
	out := Document{}
	if folders := moduleFolders(tree["folders"]); len(folders) > 0 {
		out["folders"] = folders
	}
	entities, _ := tree["entities"].([]any)
	if len(entities) == 0 {
		return out
	}
	if inFolder {
		out["entities"] = entities
		return out
	}
	groups := Document{}
	for _, en := range entities {
		m, _ := en.(Document)
		// The uuid names the document type even when the entry is the
		// full data, whose `type` is the document's own sub-type.
		typ, _, _ := strings.Cut(str(m["uuid"]), ".")
		key := strings.ToLower(typ) + "s"
		list, _ := groups[key].([]any)
		groups[key] = append(list, en)
	}
	out["entities"] = groups
	return out
}

// moduleFolders keys a Structure's folder list by name, nesting each
// folder's sub-folders inside it.
func moduleFolders(v any) Document {
	list, _ := v.([]any)
	out := Document{}
	for _, f := range list {
		node, _ := f.(Document)
		if node == nil {
			continue
		}
		id := str(node["id"])
		mod := Document{"id": node["id"], "uuid": node["uuid"], "type": node["type"]}
		for name, sub := range moduleFolders(node["folders"]) {
			mod[name] = sub
		}
		if entities, _ := node["entities"].([]any); len(entities) > 0 {
			mod["entities"] = entities
		}
		key := str(node["name"])
		switch key {
		case "", "id", "uuid", "type", "entities":
			key = id
		}
		if _, taken := out[key]; taken {
			key = id
		}
		out[key] = mod
	}
	return out
}
