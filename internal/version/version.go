// Package version is the version the binaries report (`weighstation
// version`, `weighstation-sidecar -version`). It imports nothing but the
// standard library, so that the sidecar's binary can link it.
package version

import (
	"runtime/debug"
)

// Version is stamped at link time by `make binaries`:
//
//	-ldflags "-X github.com/weighstation/weighstation/internal/version.Version=v1.2.3"
//
// Empty in a plain `go build`, where String falls back to what the Go
// toolchain recorded.
var Version string

// String is the stamped version; without one, the module version the Go
// toolchain recorded from the VCS (a pseudo-version, "+dirty" for a
// modified tree), else "devel".
func String() string {
	if Version != "" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return "devel"
}
