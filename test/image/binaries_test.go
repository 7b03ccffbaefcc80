package image_test

import (
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testVersion is what TestBinaries stamps.
const testVersion = "test-1.2.3"

// allowedKubernetesModule is the one module under k8s.io/ or sigs.k8s.io/
// that weighstation-sidecar may link (cmd/weighstation-sidecar's deps
// test allows the same package): the -config file's YAML decoding.
const allowedKubernetesModule = "sigs.k8s.io/yaml"

// TestBinaries runs `make binaries`, as the Dockerfile's build stage does,
// in a copy of the build context (what .dockerignore leaves, without .git),
// and checks what it makes: both binaries, static (the image has no libc),
// stripped, built -trimpath without cgo, stamped with VERSION (asked of
// the binaries: Go keeps no -ldflags in a -trimpath build's information),
// and the sidecar's without Kubernetes modules.
func TestBinaries(t *testing.T) {
	context, out := t.TempDir(), t.TempDir()
	copyContext(t, readDockerignore(t), context)
	cmd := exec.Command("make", "binaries", "VERSION="+testVersion, "BIN_DIR="+out)
	cmd.Dir = context
	// Run from `make test`, the environment carries the outer make's
	// job server, which this make must not join.
	cmd.Env = withoutVars(os.Environ(), "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
	if log, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make binaries in the build context: %v\n%s", err, log)
	}
	tests := []struct {
		name string
		// versionArgs print the version.
		versionArgs []string
		// kubernetes: the binary links the Kubernetes libraries.
		kubernetes bool
	}{
		{"weighstation", []string{"version"}, true},
		{"weighstation-sidecar", []string{"-version"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bin := filepath.Join(out, tc.name)
			checkStatic(t, bin)
			got, err := exec.Command(bin, tc.versionArgs...).Output()
			if err != nil || strings.TrimSpace(string(got)) != testVersion {
				t.Errorf("%s %s: %q, %v; want %s", tc.name, strings.Join(tc.versionArgs, " "), got, err, testVersion)
			}
			// What `go version -m` prints.
			info, err := buildinfo.ReadFile(bin)
			if err != nil {
				t.Fatalf("reading the build information: %v", err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" {
				t.Errorf("built with -trimpath=%q CGO_ENABLED=%q, want true and 0", settings["-trimpath"], settings["CGO_ENABLED"])
			}
			var kubernetes []string
			for _, dep := range info.Deps {
				if (strings.HasPrefix(dep.Path, "k8s.io/") || strings.HasPrefix(dep.Path, "sigs.k8s.io/")) && dep.Path != allowedKubernetesModule {
					kubernetes = append(kubernetes, dep.Path)
				}
			}
			// The operator's binary lists them: the check reads the right
			// information.
			if got := len(kubernetes) > 0; got != tc.kubernetes {
				t.Errorf("links Kubernetes modules: %t, want %t: %v", got, tc.kubernetes, kubernetes)
			}
		})
	}
}

// checkStatic fails unless bin is a stripped ELF executable that needs no
// dynamic loader or shared library: distroless static and scratch have
// neither.
func checkStatic(t *testing.T, bin string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Errorf("%s has a %s program header: dynamically linked", filepath.Base(bin), p.Type)
		}
	}
	if f.Section(".symtab") != nil {
		t.Errorf("%s has a symbol table: not stripped (-ldflags -s)", filepath.Base(bin))
	}
	libs, err := f.ImportedLibraries()
	if err != nil || len(libs) > 0 {
		t.Errorf("%s needs shared libraries %v (%v)", filepath.Base(bin), libs, err)
	}
}

// withoutVars is env without the variables names.
func withoutVars(env []string, names ...string) []string {
	var kept []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(names, name) {
			kept = append(kept, kv)
		}
	}
	return kept
}
