package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// allowedKubernetesPackages are the only packages under k8s.io/ or
// sigs.k8s.io/ that the sidecar's binary may link: sigs.k8s.io/yaml decodes
// the -config file (YAML to JSON, then encoding/json) and has no package
// init of note. The sidecar package's own test (sidecar/deps_test.go)
// allows the same one.
var allowedKubernetesPackages = map[string]bool{"sigs.k8s.io/yaml": true}

// TestBinaryLinksNoKubernetesPackage: Go runs the init of every package a
// binary links, so one import of client-go or controller-runtime anywhere
// under the sidecar (a logger, a helper) would bring back the Kubernetes
// libraries' idle memory into every pod. sidecar/deps_test.go checks the
// sidecar's packages; this checks everything the binary links, its command
// line included.
func TestBinaryLinksNoKubernetesPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps ./cmd/weighstation-sidecar: %v\n%s", err, stderr(err))
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp") {
		t.Fatalf("go list -deps does not list the sidecar's command (cmd/weighstation-sidecar/sidecarapp): %v", deps)
	}
	var found []string
	for _, pkg := range deps {
		if isKubernetes(pkg) && !allowedKubernetesPackages[pkg] {
			found = append(found, pkg)
		}
	}
	if len(found) > 0 {
		t.Fatalf("weighstation-sidecar links Kubernetes packages (go list -deps ./cmd/weighstation-sidecar; `go mod why -m` says why): %v", found)
	}
}

// isKubernetes reports whether an import or module path is Kubernetes'.
func isKubernetes(path string) bool {
	return strings.HasPrefix(path, "k8s.io/") || strings.HasPrefix(path, "sigs.k8s.io/")
}

func TestIsKubernetes(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"k8s.io/apimachinery/pkg/runtime", true},
		{"sigs.k8s.io/controller-runtime", true},
		{"sigs.k8s.io/yaml", true},
		{"github.com/weighstation/weighstation/sidecar", false},
		{"go.uber.org/zap", false},
		{"example.com/k8s.io/x", false},
	}
	for _, tc := range tests {
		if got := isKubernetes(tc.path); got != tc.want {
			t.Errorf("isKubernetes(%q) = %t, want %t", tc.path, got, tc.want)
		}
	}
}

func stderr(err error) []byte {
	if exit, ok := err.(*exec.ExitError); ok {
		return exit.Stderr
	}
	return nil
}
