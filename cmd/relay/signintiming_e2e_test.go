package main

import (
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tabletop-relay/relay/node"
	"github.com/tabletop-relay/relay/server/signin"
)

// TestSignInTimingSameForUnknownName: a sign-in with a name no account
// has takes as long as one with an account's name and a wrong password
// (the relay checks a dummy hash for the first), so that timing does not
// tell which names exist. The medians of a few attempts of each are
// compared: under load they may differ, but not by half, and never by
// the tenfold a skipped hash would make.
func TestSignInTimingSameForUnknownName(t *testing.T) {
	t.Parallel()
	tr := startTestRelay(t, func(c *node.Config) { c.SignInRateLimit = 0 })
	if r := tr.Do(http.MethodPost, "/accounts", tr.AdminKey, nil, map[string]any{"name": "Guild", "password": guildPassword}); r.Status != http.StatusOK {
		t.Fatalf("create account: %d %s", r.Status, r.Body)
	}
	timed := func(name string) time.Duration {
		t.Helper()
		began := time.Now()
		r := tr.Do(http.MethodPost, signin.PathSession, "", nil, map[string]any{"name": name, "password": "a wrong password"})
		took := time.Since(began)
		if r.Status != http.StatusUnauthorized {
			t.Fatalf("sign-in as %s: %d %s, want 401", name, r.Status, r.Body)
		}
		return took
	}
	// One of each first, so that neither pays for warming up; then the
	// attempts alternate, so that the machine's load falls on both. The
	// account's name is tried fewer times than locks it out.
	timed("Guild")
	timed("warm-up")
	var wrong, unknown []time.Duration
	for i := range signin.LockoutFailures - 1 {
		unknown = append(unknown, timed(fmt.Sprintf("nobody-%d", i)))
		wrong = append(wrong, timed("Guild"))
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	w, u := median(wrong), median(unknown)
	t.Logf("median sign-in: wrong password %v, unknown name %v", w, u)
	if u*10 < w || w*10 < u {
		t.Fatalf("an unknown name takes %v and a wrong password %v: one is under a tenth of the other, which tells the names apart", u, w)
	}
	if ratio := float64(u) / float64(w); ratio < 0.5 || ratio > 2 {
		t.Fatalf("an unknown name takes %v and a wrong password %v (ratio %.2f, want 0.5 to 2)", u, w, ratio)
	}
}
