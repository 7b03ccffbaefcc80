package chart_test

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// The chart's CRDs are config/crd/bases' (hack/chartgen generates them;
// verify-generate.sh checks they are current): the same spec, and only
// the keep policy and the chart's labels added.
func TestCRDsAreConfigs(t *testing.T) {
	rendered := find(render(t), "CustomResourceDefinition")
	paths, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("config/crd/bases: %v, %d files", err, len(paths))
	}
	if len(rendered) != len(paths) {
		t.Fatalf("%d CRDs rendered, %d in config/crd/bases", len(rendered), len(paths))
	}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		want := parse(t, string(data))[0]
		got := one(t, rendered, "CustomResourceDefinition", want.GetName())
		if !reflect.DeepEqual(got.Object["spec"], want.Object["spec"]) {
			t.Errorf("CRD %s: the chart's spec differs from %s: run `make generate`", want.GetName(), path)
		}
		for k, v := range want.GetAnnotations() {
			if got.GetAnnotations()[k] != v {
				t.Errorf("CRD %s: annotation %s=%q, want %q", want.GetName(), k, got.GetAnnotations()[k], v)
			}
		}
	}
}
