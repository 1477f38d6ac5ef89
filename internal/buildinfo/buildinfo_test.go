package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDerive(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) *debug.BuildInfo {
		return &debug.BuildInfo{
			Main: debug.Module{Path: "retry-scheduler", Version: "(devel)"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: rev},
				{Key: "vcs.modified", Value: modified},
			},
		}
	}
	tagged := vcs("false")
	tagged.Main.Version = "v1.4.0"
	for _, tc := range []struct {
		name               string
		stampedV, stampedR string
		bi                 *debug.BuildInfo
		want               Info
	}{
		{"stamped", "1.4.0", "feedface", vcs("true"),
			Info{Version: "1.4.0", Revision: "feedface", GoVersion: "go1.x"}},
		{"stamped version only: revision from vcs", "1.4.0", "", vcs("false"),
			Info{Version: "1.4.0", Revision: rev, GoVersion: "go1.x"}},
		{"module version", "", "", tagged,
			Info{Version: "v1.4.0", Revision: rev, GoVersion: "go1.x"}},
		{"devel with revision, modified", "", "", vcs("true"),
			Info{Version: "devel+0123456789ab-dirty", Revision: rev, GoVersion: "go1.x"}},
		{"devel with revision, clean", "", "", vcs("false"),
			Info{Version: "devel+0123456789ab", Revision: rev, GoVersion: "go1.x"}},
		{"devel without vcs", "", "", &debug.BuildInfo{Main: debug.Module{Path: "retry-scheduler", Version: "(devel)"}},
			Info{Version: UnknownVersion, Revision: UnknownRevision, GoVersion: "go1.x"}},
		{"nothing", "", "", nil,
			Info{Version: UnknownVersion, Revision: UnknownRevision, GoVersion: "go1.x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, derive(tc.stampedV, tc.stampedR, tc.bi, "go1.x"))
		})
	}
}

func TestString(t *testing.T) {
	i := Info{Version: "1.4.0", Revision: "feedface", GoVersion: "go1.26.8"}
	assert.Equal(t, "retry-scheduler 1.4.0 (revision feedface, go1.26.8)", i.String())
}

func TestGet(t *testing.T) {
	got := Get()
	assert.Equal(t, runtime.Version(), got.GoVersion)
	assert.NotEmpty(t, got.Version)
	assert.NotEmpty(t, got.Revision)
	assert.Equal(t, got, Get(), "the same on every call")
}
