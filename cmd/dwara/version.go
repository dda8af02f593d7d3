package main

import (
	"runtime"
	"runtime/debug"
)

// version is the version of this build, set by the linker:
//
//	go build -ldflags "-X main.version=$(git describe --always --dirty)" ./cmd/dwara
//
// (make build and make install do so). Empty means buildVersion works it
// out from the build information.
var version string

// buildVersion returns the version of this build: the linker's, else the
// module version or VCS revision the Go toolchain recorded, else "devel".
func buildVersion() string {
	bi, ok := debug.ReadBuildInfo()
	return versionOf(version, bi, ok)
}

// versionOf is buildVersion for a linker-set version ldflag and the build
// information bi (ok false when there is none).
func versionOf(ldflag string, bi *debug.BuildInfo, ok bool) string {
	if ldflag != "" {
		return ldflag
	}
	if !ok || bi == nil {
		return "devel"
	}
	// `go install github.com/dwara/dwara/cmd/dwara@v1.2.3` records the
	// module version; a build in a work tree records "(devel)" and, with
	// VCS stamping, the revision.
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// versionLine is what `dwara version` prints: the version, then the Go
// version and platform of the build.
func versionLine() string {
	return "dwara " + buildVersion() + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// versionInfo is what `dwara version -o json` prints.
func versionInfo() map[string]string {
	return map[string]string{
		"version":  buildVersion(),
		"go":       runtime.Version(),
		"platform": runtime.GOOS + "/" + runtime.GOARCH,
	}
}
