package node

import (
	"runtime/debug"
	"testing"

	"github.com/tabletop-relay/relay/gateway"
)

// TestBuildInfoOf: the commit and its time come from the settings Go
// records in a clone (vcs.revision, vcs.time, vcs.modified), the version
// from the module's; what Go did not record stays empty, the version
// "devel".
func TestBuildInfoOf(t *testing.T) {
	t.Parallel()
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-25T22:36:35Z"},
			{Key: "vcs.modified", Value: modified},
		}
	}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want gateway.BuildInfo
	}{
		{"go build in a clone", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261125223635-0123456789ab"}, Settings: vcs("false")},
			gateway.BuildInfo{Version: "v0.0.0-20261125223635-0123456789ab", Commit: "0123456789abcdef0123456789abcdef01234567", Date: "2026-11-25T22:36:35Z"}},
		{"uncommitted changes", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs("true")},
			gateway.BuildInfo{Version: "devel", Commit: "0123456789abcdef0123456789abcdef01234567-dirty", Date: "2026-11-25T22:36:35Z"}},
		{"go install of a release", debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}},
			gateway.BuildInfo{Version: "v1.2.0"}},
		{"no VCS information", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			gateway.BuildInfo{Version: "devel"}},
	} {
		if got := BuildInfoOf(&c.bi); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
