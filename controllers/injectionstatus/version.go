package injectionstatus

import (
	"fmt"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// MinSidecarVersion is the oldest sidecar the operator supports: an
// injected pod whose weighstation.io/injected annotation names an older
// release is reported like a pod without the sidecar (SidecarOutdated).
// Raise it with a release that drops support for older sidecars.
const MinSidecarVersion = "v0.1.0"

// sidecarOutdated reports whether the injected version is a release older
// than minimum. Only plain releases (v1.2.3) are judged: "unknown",
// "devel", pseudo-versions and `git describe` strings of dev builds
// (v1.2.3-4-gabcdef, +dirty) have no place in the supported range that the
// operator could know, and reporting every dev build would be noise.
func sidecarOutdated(injected, minimum string) bool {
	v, err := utilversion.ParseSemantic(injected)
	if err != nil || v.PreRelease() != "" || v.BuildMetadata() != "" {
		return false
	}
	lowest, err := parseMinSidecarVersion(minimum)
	if err != nil {
		return false // refused at setup (ParseMinSidecarVersion)
	}
	return v.LessThan(lowest)
}

// parseMinSidecarVersion parses a minimum version ("" is
// MinSidecarVersion); it must be a plain release.
func parseMinSidecarVersion(minimum string) (*utilversion.Version, error) {
	if minimum == "" {
		minimum = MinSidecarVersion
	}
	v, err := utilversion.ParseSemantic(minimum)
	if err != nil {
		return nil, fmt.Errorf("minimum sidecar version %q: %w", minimum, err)
	}
	if v.PreRelease() != "" || v.BuildMetadata() != "" {
		return nil, fmt.Errorf("minimum sidecar version %q: want a release, like v1.2.3", minimum)
	}
	return v, nil
}
