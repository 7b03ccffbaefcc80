package injectionstatus

import "testing"

func TestSidecarOutdated(t *testing.T) {
	for _, c := range []struct {
		injected, minimum string
		want              bool
	}{
		{"v0.9.0", "v1.0.0", true},
		{"0.9.0", "v1.0.0", true},
		{"v1.0.0", "v1.0.0", false},
		{"v1.2.3", "v1.0.0", false},
		{"v0.99.0", "v1.0.0", true},
		// Not releases: never judged.
		{"unknown", "v1.0.0", false},
		{"devel", "v1.0.0", false},
		{"", "v1.0.0", false},
		{"v0.9.0-4-gabcdef", "v1.0.0", false},
		{"v0.9.0+dirty", "v1.0.0", false},
		{"v0.0.0-20260101000000-abcdefabcdef", "v1.0.0", false},
		// The default minimum.
		{"v0.0.1", "", true},
		{MinSidecarVersion, "", false},
	} {
		if got := sidecarOutdated(c.injected, c.minimum); got != c.want {
			t.Errorf("sidecarOutdated(%q, %q) = %v, want %v", c.injected, c.minimum, got, c.want)
		}
	}
}

func TestParseMinSidecarVersionRefusesNonReleases(t *testing.T) {
	for _, v := range []string{"unknown", "v1.0.0-rc.1", "v1.0.0+dirty", "1.0"} {
		if _, err := parseMinSidecarVersion(v); err == nil {
			t.Errorf("parseMinSidecarVersion(%q) succeeded, want an error", v)
		}
	}
}
