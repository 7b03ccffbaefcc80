// Package chart_test tests the Helm chart (charts/weighstation): helm lint,
// what it renders for a table of values, what values.schema.json refuses,
// and install, upgrade and uninstall with the built helm (bin/helm) against
// the real kube-apiserver (envtest).
package chart_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, from this package's directory.
var chartDir = filepath.Join("..", "..", "charts", "weighstation")

// helmTimeout bounds every helm command (helm's own --timeout bounds its
// waits on the apiserver; install does not wait for readiness here).
const helmTimeout = 2 * time.Minute

// helmBinary is bin/helm, which hack/setup-envtest.sh builds.
func helmBinary(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v: run `make envtest` (hack/setup-envtest.sh builds helm)", path, err)
	}
	return path
}

// helm runs bin/helm with args and returns its stdout, or its error with
// stderr.
func helm(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	// A home of its own: no user's repositories, plugins or cache.
	home := t.TempDir()
	cmd.Env = append(append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), errors.Join(err, errors.New(stderr.String()))
	}
	return stdout.String(), nil
}

// helmWithLog runs bin/helm with args and returns its stdout and stderr
// (where --debug logs), or its error with both.
func helmWithLog(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), helmTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBinary(t), args...)
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var out, log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &log
	err = cmd.Run()
	return out.String(), log.String(), err
}

// render is `helm template` of the chart as release "weighstation" in
// namespace "mesh" with values set (key=value), parsed.
func render(t *testing.T, set ...string) []*unstructured.Unstructured {
	t.Helper()
	out, err := renderErr(t, set...)
	if err != nil {
		t.Fatalf("helm template %v: %v", set, err)
	}
	return parse(t, out)
}

func renderErr(t *testing.T, set ...string) (string, error) {
	t.Helper()
	args := []string{"template", "weighstation", chartDir, "--namespace", "mesh"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return helm(t, nil, args...)
}

// parse splits a multi-document YAML stream into objects.
func parse(t *testing.T, text string) []*unstructured.Unstructured {
	t.Helper()
	var objs []*unstructured.Unstructured
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader([]byte(text))))
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the objects of kind.
func find(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var found []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			found = append(found, o)
		}
	}
	return found
}

// one returns the object of kind and name, failing the test without it.
func one(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range find(objs, kind) {
		if o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}

// fmtErr is fmt.Errorf, for the checks' short messages.
func fmtErr(format string, args ...any) error { return fmt.Errorf(format, args...) }
