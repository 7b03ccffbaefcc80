package controllers_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// kubectl runs the real kubectl (built by hack/setup-envtest.sh beside the
// apiserver) against the test apiserver.
func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	bin := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestKubectlGetWsubShowsTheColumns(t *testing.T) {
	ns := newNamespace(t)
	if err := k8sClient.Create(context.Background(), newSubscription(ns, "billing", "orders.*", map[string]string{"app": "billing"})); err != nil {
		t.Fatal(err)
	}
	out := kubectl(t, "get", "wsub", "-n", ns)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get wsub printed %d lines, want a header and one row:\n%s", len(lines), out)
	}
	header := strings.Fields(lines[0])
	want := []string{"NAME", "SUBJECT", "ESSENTIAL", "KILLED", "PODS", "P99", "P99.9", "MAX", "DROPPED", "READY", "AGE"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Fatalf("columns %v, want %v", header, want)
	}
	row := strings.Fields(lines[1])
	if row[0] != "billing" || row[1] != "orders.*" || row[2] != "true" {
		t.Fatalf("row %v: want name billing, subject orders.*, essential true", row)
	}
	// The category lists both kinds.
	if all := kubectl(t, "get", "weighstation", "-n", ns); !strings.Contains(all, "subscription.weighstation.io/billing") {
		t.Fatalf("kubectl get weighstation does not list the subscription:\n%s", all)
	}
	if err := k8sClient.Create(context.Background(), newTopic(ns, "orders", "orders.>")); err != nil {
		t.Fatal(err)
	}
	topics := strings.Split(strings.TrimSpace(kubectl(t, "get", "wtopic", "-n", ns)), "\n")
	wantTopic := []string{"NAME", "SUBJECT", "MAX-BYTES", "RATE", "PUBLISHED", "READY", "AGE"}
	if got := strings.Fields(topics[0]); strings.Join(got, " ") != strings.Join(wantTopic, " ") {
		t.Fatalf("topic columns %v, want %v", got, wantTopic)
	}
	if row := strings.Fields(topics[1]); row[0] != "orders" || row[1] != "orders.>" || row[2] != "1048576" {
		t.Fatalf("topic row %v: want orders, orders.>, the default 1048576 bytes", row)
	}
}

func TestKubectlExplainDocumentsTheKillSwitch(t *testing.T) {
	out := kubectl(t, "explain", "subscription.spec.killSwitch")
	for _, want := range []string{
		"KillSwitch stops delivery to this subscription",
		"engaged", "Engaged stops delivery now",
		"reason", "auto", "Auto trips the switch by itself",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl explain subscription.spec.killSwitch lacks %q:\n%s", want, out)
		}
	}
	auto := kubectl(t, "explain", "subscription.spec.killSwitch.auto.cooldown")
	if !strings.Contains(auto, "Cooldown is how long a tripped switch stays open") {
		t.Errorf("kubectl explain ...auto.cooldown:\n%s", auto)
	}
}

// TestEveryFieldIsDocumented walks the generated CRD schemas: every
// property must have a description, so that kubectl explain documents it.
func TestEveryFieldIsDocumented(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "config", "crd", "bases", "*.yaml"))
	if len(files) != 2 {
		t.Fatalf("found %d CRDs, want 2", len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(data, &crd); err != nil {
			t.Fatal(err)
		}
		for _, v := range crd.Spec.Versions {
			checkDescribed(t, crd.Spec.Names.Kind, v.Schema.OpenAPIV3Schema)
		}
	}
}

func checkDescribed(t *testing.T, path string, s *apiextensionsv1.JSONSchemaProps) {
	t.Helper()
	if s == nil {
		return
	}
	for name, prop := range s.Properties {
		p := path + "." + name
		if p == path+".metadata" && !strings.Contains(path, ".") {
			continue // the object's ObjectMeta, documented by Kubernetes itself
		}
		if strings.TrimSpace(prop.Description) == "" {
			t.Errorf("%s has no description", p)
		}
		checkDescribed(t, p, &prop)
	}
	if s.Items != nil && s.Items.Schema != nil {
		checkDescribed(t, path+"[]", s.Items.Schema)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		checkDescribed(t, path+"{}", s.AdditionalProperties.Schema)
	}
}
