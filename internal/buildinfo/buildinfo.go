// Package buildinfo is this build's identity: its version, its VCS revision and the Go that
// built it. The release build stamps version and revision with the linker:
//
//	go build -ldflags "-X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.version=1.4.0 -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.revision=$(git rev-parse HEAD)" ./cmd/retry-scheduler
//
// Without them both come from what the go command records in the binary
// (runtime/debug.ReadBuildInfo), so a plain `go build` in a checkout names its commit too.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
)

// Set with -ldflags "-X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.version=... -X github.com/retry-scheduler/retry-scheduler/internal/buildinfo.revision=...".
var (
	version  string
	revision string
)

// What Info says when nothing is known.
const (
	// UnknownVersion is the version of a build with neither a stamp nor a module version
	// nor a VCS revision (go run, go test, a build outside a checkout).
	UnknownVersion = "dev"
	// UnknownRevision is the revision of a build with neither a stamp nor a VCS revision.
	UnknownRevision = "unknown"
)

// shortRevision is how much of a commit hash a derived version keeps: as much as Go's
// pseudo-versions do.
const shortRevision = 12

// Info identifies a build.
type Info struct {
	// Version is the stamped version; else the main module's version as the go command
	// recorded it (a tag, or a pseudo-version with +dirty); else "devel+<revision>" (12 hex
	// digits, "-dirty" when the checkout had uncommitted changes); else UnknownVersion.
	Version string
	// Revision is the stamped revision, else the VCS revision, else UnknownRevision.
	Revision string
	// GoVersion is the Go that built the binary (runtime.Version()).
	GoVersion string
}

// String is the one line of `retry-scheduler -version`.
func (i Info) String() string {
	return fmt.Sprintf("retry-scheduler %s (revision %s, %s)", i.Version, i.Revision, i.GoVersion)
}

// Get returns this build's identity (computed once).
func Get() Info { return get() }

var get = sync.OnceValue(func() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return derive(version, revision, bi, runtime.Version())
})

// derive is Get's rule, from the stamped values, the recorded build information (nil when
// there is none) and the Go version.
func derive(stampedVersion, stampedRevision string, bi *debug.BuildInfo, goVersion string) Info {
	var moduleVersion, vcsRevision string
	var dirty bool
	if bi != nil {
		moduleVersion = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				vcsRevision = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	info := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: goVersion}
	if info.Revision == "" {
		info.Revision = vcsRevision
	}
	if info.Revision == "" {
		info.Revision = UnknownRevision
	}
	switch {
	case info.Version != "":
	case moduleVersion != "" && moduleVersion != "(devel)":
		info.Version = moduleVersion
	case vcsRevision != "":
		info.Version = "devel+" + vcsRevision[:min(len(vcsRevision), shortRevision)]
		if dirty {
			info.Version += "-dirty"
		}
	default:
		info.Version = UnknownVersion
	}
	return info
}
