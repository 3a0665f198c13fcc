package gateway

import (
	"slices"
	"strings"
	"testing"
)

func TestParseCORSOrigins(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{in: "", want: nil},
		{in: " , ", want: nil},
		{in: "*", want: []string{"*"}},
		{in: "https://App.Example.org, http://localhost:5173", want: []string{"https://app.example.org", "http://localhost:5173"}},
		{in: "https://example.org:443,http://example.org:80/", want: []string{"https://example.org", "http://example.org"}},
		{in: "http://[::1]:8080,http://[::1]:8080", want: []string{"http://[::1]:8080"}},
		{in: "*,https://example.org", err: `"*" allows every origin`},
		{in: "null", err: `origin "null" is not allowed`},
		{in: "https://example.org/app", err: `origin "https://example.org/app" is not an origin`},
		{in: "example.org", err: `origin "example.org" is not an origin`},
		{in: "ftp://example.org", err: `origin "ftp://example.org" is not an origin`},
		{in: "https://user@example.org", err: `is not an origin`},
		{in: "https://example.org?x=1", err: `is not an origin`},
		{in: "https://example.org:99999", err: `has a bad port`},
	} {
		got, err := ParseCORSOrigins(tc.in)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want one with %q", tc.in, err, tc.err)
		case tc.err == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%q: %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
