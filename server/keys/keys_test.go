package keys

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestAllScopes(t *testing.T) {
	t.Parallel()
	want := []string{
		"entity:read", "entity:write", "search", "structure:read", "structure:write",
		"encounter:read", "encounter:manage", "execute-js", "file:read", "file:write",
		"clients:read", "dnd5e", "events:subscribe", "admin", "accounts",
	}
	if !slices.Equal(AllScopes, want) {
		t.Fatalf("AllScopes = %v, want %v", AllScopes, want)
	}
}

func TestParseScopes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      string
		want    []string
		wantErr string // substring; empty means success
	}{
		{name: "single", in: "search", want: []string{"search"}},
		{name: "canonical order and spaces", in: " dnd5e , entity:read,search ", want: []string{"entity:read", "search", "dnd5e"}},
		{name: "duplicates removed", in: "search,search,search", want: []string{"search"}},
		{name: "empty entries ignored", in: "search,,admin,", want: []string{"search", "admin"}},
		{name: "all", in: "all", want: AllScopes},
		{name: "all with others", in: "search,all", want: AllScopes},
		{name: "empty", in: "", wantErr: "at least one scope"},
		{name: "only commas", in: " , ,", wantErr: "at least one scope"},
		{name: "unknown", in: "search,roll:read", wantErr: `unknown scope "roll:read"`},
		{name: "case matters", in: "Search", wantErr: `unknown scope "Search"`},
		{name: "the valid ones are listed", in: "wizardry", wantErr: `unknown scope "wizardry" (the scopes are entity:read, entity:write, search,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseScopes(tt.in)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseScopes(%q) error = %v, want ErrInvalid containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseScopes(%q): %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("ParseScopes(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestKeyMethods(t *testing.T) {
	t.Parallel()
	unbound := Key{Scopes: []string{"search", "dnd5e"}}
	global := Key{ClientIDs: []string{"w1", "w2"}, ScopedUserID: "gm-user"}
	perClient := Key{
		ClientIDs:    []string{"w1", "w2", "w3"},
		ScopedUserID: "fallback",
		ClientUsers:  map[string]string{"w1": "alice", "w2": "bob"},
	}
	perClientOnly := Key{ClientUsers: map[string]string{"w1": "alice"}}

	tests := []struct {
		name string
		got  any
		want any
	}{
		{"HasScope present", unbound.HasScope("dnd5e"), true},
		{"HasScope absent", unbound.HasScope("admin"), false},
		{"HasScope empty name", unbound.HasScope(""), false},
		{"admin does not imply others", Key{Scopes: []string{"admin"}}.HasScope("search"), false},
		{"BoundTo unbound key", unbound.BoundTo("anything"), true},
		{"BoundTo listed", global.BoundTo("w2"), true},
		{"BoundTo not listed", global.BoundTo("w9"), false},
		{"BoundTo empty client on bound key", global.BoundTo(""), false},
		{"UserFor none", unbound.UserFor("w1"), ""},
		{"UserFor global", global.UserFor("w1"), "gm-user"},
		{"UserFor per client", perClient.UserFor("w2"), "bob"},
		{"UserFor falls back to global", perClient.UserFor("w3"), "fallback"},
		{"UserFor per client without global", perClientOnly.UserFor("w2"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestValidClientID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want bool
	}{
		{"a", true},
		{"World_1-b", true},
		{"0abc", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"_lead", false},
		{"-lead", false},
		{"has space", false},
		{"dot.ted", false},
		{"ünï", false},
		{"a\n", false},
	}
	for _, tt := range tests {
		if got := ValidClientID(tt.id); got != tt.want {
			t.Errorf("ValidClientID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}
