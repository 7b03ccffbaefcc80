package sidecar_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The sidecar runs in every pod: it shares only the configuration types and
// the wire protocol with the operator and carries no Kubernetes client. YAML
// decoding of the configuration file is the one exception.
func TestSidecarImportsNoKubernetesPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./sidecar/...: %v\n%s", err, out)
	}
	allowed := map[string]bool{"sigs.k8s.io/yaml": true}
	var found []string
	for _, pkg := range strings.Fields(string(out)) {
		if (strings.HasPrefix(pkg, "k8s.io/") || strings.HasPrefix(pkg, "sigs.k8s.io/")) && !allowed[pkg] {
			found = append(found, pkg)
		}
	}
	if len(found) > 0 {
		t.Fatalf("the sidecar's packages import Kubernetes packages: %v", found)
	}
}
