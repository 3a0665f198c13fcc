package world

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestScoreName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, query string
		want        int
	}{
		{"goblin", "goblin", scoreExact},
		{"goblin archer", "gob", scorePrefix},
		{"hobgoblin", "gob", scoreSubstring},
		{"goblin archer", "gob arch", scoreWordPrefix},
		{"goblin archer", "gbn", scoreSubsequence},
		{"goblin", "orc", scoreNone},
		{"goblin", "", 0},
	}
	for _, tt := range tests {
		if got := scoreName(tt.name, tt.query); got != tt.want {
			t.Errorf("scoreName(%q, %q) = %d, want %d", tt.name, tt.query, got, tt.want)
		}
	}
}

func names(results []Document) []string {
	out := make([]string, len(results))
	for i, r := range results {
		out[i] = fmt.Sprint(r["name"])
	}
	return out
}

func TestSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tw := newTestWorld(t)
	for _, n := range []string{"Hobgoblin", "Goblin Boss", "Great Old Bat"} {
		if _, err := tw.Create(ctx, nil, CreateParams{Type: "Actor", Data: Document{"name": n, "type": "npc"}}); err != nil {
			t.Fatal(err)
		}
	}
	alice := tw.user(t, aliceID)

	tests := []struct {
		name string
		user *User
		p    SearchParams
		want []string
	}{
		{"tiers, then names", nil, SearchParams{Query: "goblin"}, []string{"Goblin", "Goblin Boss", "Hobgoblin"}},
		{"word prefixes and subsequences", nil, SearchParams{Query: "g b"}, []string{"Goblin Boss", "Great Old Bat", "Goblin", "Hobgoblin"}},
		{"a type filter", nil, SearchParams{Query: "o", Filter: "Item"}, []string{"Rope"}}, // embedded items are not searched
		{"key:value filters", nil, SearchParams{Filter: "documentType:actor, folder:Folder." + heroesFolder}, []string{"Hero"}},
		{"a subType filter", nil, SearchParams{Filter: "subType:loot"}, []string{"Rope"}},
		{"a limit", nil, SearchParams{Query: "goblin", Limit: 1}, []string{"Goblin"}},
		{"permissions before the limit", alice, SearchParams{Filter: "Actor", Limit: 2}, []string{"Companion", "Hero"}},
		{"a scene", alice, SearchParams{Query: "cave"}, []string{"Cave"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tw.Search(ctx, tt.user, tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, names(got)); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}

	full, err := tw.Search(ctx, nil, SearchParams{Query: "rop"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Document{{
		"documentType": "Item", "folder": itemsFolder, "id": "WorldItem0000001", "name": "Rope",
		"package": nil, "packageName": nil, "subType": "loot", "uuid": ropeUUID, "icon": "icons/rope.png",
		"journalLink": "@UUID[" + ropeUUID + "]{Rope}", "tagline": "Items Directory",
		"formattedMatch": "<strong>Rop</strong>e", "resultType": "WorldEntity",
	}}
	if diff := cmp.Diff(want, full); diff != "" {
		t.Errorf("entry (-want +got):\n%s", diff)
	}

	_, err = tw.Search(ctx, nil, SearchParams{Limit: -1})
	wantError(t, err, ErrInvalid, "'limit' must be a positive number")
	_, err = tw.Search(ctx, nil, SearchParams{Filter: "a:b,c"})
	wantError(t, err, ErrInvalid, "'filter' must be a document type or comma-separated key:value pairs")
}
