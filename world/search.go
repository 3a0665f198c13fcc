package world

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"unicode"
)

// Search follows the tabletop module's search (reference §4.4) over the
// world's Actors, Items, Scenes, JournalEntries and Macros (there are no
// compendiums here).

// Search limits.
const (
	defaultSearchLimit = 200
	maxSearchLimit     = 500
)

// searchTypes are the types searched, with their directory labels.
var searchTypes = []struct {
	typ     *docType
	tagline string
}{
	{typeActor, "Actors Directory"},
	{typeItem, "Items Directory"},
	{typeScene, "Scenes Directory"},
	{typeJournalEntry, "Journal Directory"},
	{typeMacro, "Macros Directory"},
}

// Scores of a name against a query, best first.
const (
	scoreExact       = 100 // the name is the query
	scorePrefix      = 80  // the name starts with the query
	scoreSubstring   = 60  // the name contains the query
	scoreWordPrefix  = 40  // every word of the query starts a word of the name
	scoreSubsequence = 20  // the query's letters appear in the name in order
	scoreNone        = -1
)

// Search finds documents by name. Every name is scored against the query,
// case-insensitively (exact 100, prefix 80, substring 60, word prefixes 40,
// subsequence 20; no match is excluded; an empty query matches everything
// with 0); results are sorted by score, then name, and cut at the limit
// (default 200, at most 500). The filter is a document type ("Actor") or
// comma-separated key:value pairs matched case-insensitively against the
// entries' fields (`documentType`, `subType`, `folder` as id or
// `Folder.<id>`, `resultType`, `package`, ...).
//
// Permissions filter the results before the limit applies: documents the
// user cannot see are dropped, LIMITED ones are reduced to `uuid`, `id`,
// `name`, `img` and `documentType`, others give the full entry: `documentType`,
// `folder`, `id`, `name`, `package` and `packageName` (null: world
// documents), `subType`, `uuid`, `icon`, `journalLink`, `tagline`,
// `formattedMatch` (the matched part in <strong>) and `resultType`
// ("WorldEntity").
func (e *Engine) Search(ctx context.Context, user *User, p SearchParams) ([]Document, error) {
	if err := e.ready(); err != nil {
		return nil, err
	}
	limit := p.Limit
	switch {
	case limit < 0:
		return nil, Errorf(ErrInvalid, "'limit' must be a positive number")
	case limit == 0:
		limit = defaultSearchLimit
	case limit > maxSearchLimit:
		limit = maxSearchLimit
	}
	filter, err := parseSearchFilter(p.Filter)
	if err != nil {
		return nil, err
	}
	query := strings.ToLower(strings.TrimSpace(p.Query))

	// Entries are built only for the hits that need one: to filter, and
	// after the cut, so a broad query over a large world stays cheap.
	type hit struct {
		score   int
		name    string
		st      int // index in searchTypes
		doc     Document
		entry   Document
		limited bool
	}
	var hits []hit
	v := e.view()
	for i, st := range searchTypes {
		v.each(st.typ, func(doc Document) bool {
			name := docName(doc)
			score := scoreName(strings.ToLower(name), query)
			if score == scoreNone {
				return true
			}
			level := levelOf(user, st.typ, doc)
			if level == LevelNone {
				return true
			}
			h := hit{score: score, name: name, st: i, doc: doc, limited: level == LevelLimited}
			if len(filter) > 0 {
				h.entry = searchEntry(st.typ, st.tagline, doc, name, query, score)
				if !filter.matches(h.entry) {
					return true
				}
			}
			hits = append(hits, h)
			return true
		})
	}
	slices.SortFunc(hits, func(a, b hit) int {
		return cmp.Or(
			cmp.Compare(b.score, a.score),
			cmp.Compare(strings.ToLower(a.name), strings.ToLower(b.name)),
			cmp.Compare(a.name, b.name),
			cmp.Compare(a.st, b.st),
			cmp.Compare(str(a.doc["_id"]), str(b.doc["_id"])),
		)
	})
	if len(hits) > limit {
		hits = hits[:limit]
	}
	out := make([]Document, len(hits))
	for i, h := range hits {
		entry := h.entry
		if entry == nil {
			st := searchTypes[h.st]
			entry = searchEntry(st.typ, st.tagline, h.doc, h.name, query, h.score)
		}
		if h.limited {
			entry = Document{"uuid": entry["uuid"], "id": entry["id"], "name": entry["name"], "img": entry["icon"], "documentType": entry["documentType"]}
		}
		out[i] = entry
	}
	return out, nil
}

// searchEntry builds the index entry of a document.
func searchEntry(t *docType, tagline string, doc Document, name, query string, score int) Document {
	id := str(doc["_id"])
	uuid := t.name + "." + id
	folder := doc["folder"]
	if folder == "" {
		folder = nil
	}
	return Document{
		"documentType":   t.name,
		"folder":         folder,
		"id":             id,
		"name":           name,
		"package":        nil,
		"packageName":    nil,
		"subType":        str(doc["type"]),
		"uuid":           uuid,
		"icon":           str(doc["img"]),
		"journalLink":    "@UUID[" + uuid + "]{" + name + "}",
		"tagline":        tagline,
		"formattedMatch": formatMatch(name, query, score),
		"resultType":     "WorldEntity",
	}
}

// scoreName scores a lower-case name against a lower-case query.
func scoreName(name, query string) int {
	switch {
	case query == "":
		return 0
	case name == query:
		return scoreExact
	case strings.HasPrefix(name, query):
		return scorePrefix
	case strings.Contains(name, query):
		return scoreSubstring
	case wordPrefixes(name, query):
		return scoreWordPrefix
	case subsequence(name, query):
		return scoreSubsequence
	}
	return scoreNone
}

// words splits a name into its words.
func words(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// wordPrefixes reports whether every word of the query starts some word of
// the name ("gob arch" finds "Goblin Archer").
func wordPrefixes(name, query string) bool {
	qs, ns := words(query), words(name)
	if len(qs) == 0 {
		return false
	}
	for _, q := range qs {
		if !slices.ContainsFunc(ns, func(n string) bool { return strings.HasPrefix(n, q) }) {
			return false
		}
	}
	return true
}

// subsequence reports whether the query's characters (spaces aside) appear
// in the name in order.
func subsequence(name, query string) bool {
	rest := name
	for _, r := range query {
		if unicode.IsSpace(r) {
			continue
		}
		i := strings.IndexRune(rest, r)
		if i < 0 {
			return false
		}
		rest = rest[i+len(string(r)):]
	}
	return true
}

// formatMatch wraps the part of the name the query matched in <strong>
// for the exact, prefix and substring scores; otherwise it is the name.
func formatMatch(name, query string, score int) string {
	if score < scoreSubstring || query == "" {
		return name
	}
	lower := strings.ToLower(name)
	i := strings.Index(lower, query)
	if i < 0 || len(lower) != len(name) { // lower-casing changed the byte offsets
		return name
	}
	return name[:i] + "<strong>" + name[i:i+len(query)] + "</strong>" + name[i+len(query):]
}

// searchFilter holds the key:value pairs of a search filter.
type searchFilter []struct{ key, value string }

// parseSearchFilter reads "Actor" (a document type) or
// "documentType:Actor,folder:abc". Pairs with an empty value are ignored.
func parseSearchFilter(s string) (searchFilter, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if !strings.Contains(s, ":") {
		return searchFilter{{"documentType", s}}, nil
	}
	var f searchFilter
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, ":")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" {
			return nil, Errorf(ErrInvalid, "'filter' must be a document type or comma-separated key:value pairs")
		}
		if v != "" {
			f = append(f, struct{ key, value string }{k, v})
		}
	}
	return f, nil
}

// matches reports whether an entry passes every pair of the filter.
func (f searchFilter) matches(entry Document) bool {
	for _, kv := range f {
		if !matchField(entry, kv.key, kv.value) {
			return false
		}
	}
	return true
}

// matchField compares one filter pair with an entry, case-insensitively.
func matchField(entry Document, key, value string) bool {
	switch strings.ToLower(key) {
	case "folder":
		folder := str(entry["folder"])
		return folder != "" && (strings.EqualFold(value, folder) || strings.EqualFold(value, typeFolder.name+"."+folder))
	case "package":
		pack := str(entry["package"])
		return pack != "" && (strings.EqualFold(value, pack) || strings.EqualFold(value, "Compendium."+pack))
	}
	for k, v := range entry {
		if strings.EqualFold(k, key) {
			return v != nil && strings.EqualFold(fmt.Sprint(v), value)
		}
	}
	return false
}
