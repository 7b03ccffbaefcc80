package e2e

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

func testEnvironment(vars map[string]string, charts ...string) Environment {
	return Environment{
		Getenv: func(k string) string { return vars[k] },
		LookPath: func(name string) (string, error) {
			if name == "kubectl" || name == "helm" {
				return "/usr/bin/" + name, nil
			}
			return "", errors.New("not found")
		},
		Dir: "/src/weighstation/test/e2e",
		IsChart: func(dir string) bool {
			for _, c := range charts {
				if c == dir {
					return true
				}
			}
			return false
		},
	}
}

var requiredVars = map[string]string{
	"KUBECONFIG":           "/tmp/kubeconfig",
	"E2E_IMAGE_REPOSITORY": "weighstation.local/weighstation",
	"E2E_IMAGE_TAG":        "e2e",
}

func with(extra map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range requiredVars {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig(testEnvironment(requiredVars, "/src/weighstation/charts/weighstation"))
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		Kubeconfig: "/tmp/kubeconfig", Kubectl: "/usr/bin/kubectl", Helm: "/usr/bin/helm",
		Chart: "/src/weighstation/charts/weighstation", ImageRepository: "weighstation.local/weighstation", ImageTag: "e2e",
		PullPolicy: "Never", DemoImage: DefaultDemoImage, ProbeImage: DefaultProbeImage,
		ReleaseNamespace: "weighstation-system", AppNamespace: "e2e-apps", PodAccess: "auto", EnforceTargets: true,
	}
	if c != want {
		t.Fatalf("LoadConfig =\n%+v\nwant\n%+v", c, want)
	}
}

func TestLoadConfigChartFromTheWorkingDirectory(t *testing.T) {
	env := testEnvironment(requiredVars, "/src/weighstation/test/e2e/charts/weighstation")
	c, err := LoadConfig(env)
	if err != nil || c.Chart != "/src/weighstation/test/e2e/charts/weighstation" {
		t.Fatalf("chart %q, %v", c.Chart, err)
	}
	_, err = LoadConfig(testEnvironment(requiredVars))
	if err == nil || !strings.Contains(err.Error(), "E2E_CHART is unset") || !strings.Contains(err.Error(), filepath.Join("/src", "charts", "weighstation")) {
		t.Fatalf("no chart anywhere: %v", err)
	}
	c, err = LoadConfig(testEnvironment(with(map[string]string{"E2E_CHART": "/opt/chart"}), "/opt/chart"))
	if err != nil || c.Chart != "/opt/chart" {
		t.Fatalf("E2E_CHART: %q, %v", c.Chart, err)
	}
}

func TestLoadConfigRefusesEveryProblemAtOnce(t *testing.T) {
	env := testEnvironment(map[string]string{
		"E2E_PULL_POLICY":        "Sometimes",
		"E2E_DESTRUCTIVE":        "yes please",
		"E2E_APP_NAMESPACE":      "weighstation-system",
		"E2E_KILL_CONTAINER_CMD": "ctr tasks kill",
		"E2E_POD_ACCESS":         "telepathy",
		"E2E_TARGETS":            "ignore",
		"E2E_CHART":              "/nowhere",
	})
	_, err := LoadConfig(env)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"KUBECONFIG is required", "E2E_IMAGE_REPOSITORY and E2E_IMAGE_TAG", "E2E_PULL_POLICY", "E2E_DESTRUCTIVE", "E2E_APP_NAMESPACE", "E2E_KILL_CONTAINER_CMD", "E2E_POD_ACCESS", "E2E_TARGETS", "E2E_CHART \"/nowhere\""} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not mention %s: %v", want, err)
		}
	}
}

func TestLoadConfigOverrides(t *testing.T) {
	c, err := LoadConfig(testEnvironment(with(map[string]string{
		"E2E_KUBECTL": "/opt/k", "E2E_HELM": "/opt/h", "E2E_DESTRUCTIVE": "true", "E2E_PULL_POLICY": "IfNotPresent",
		"E2E_KILL_CONTAINER_CMD": "ctr -n k8s.io tasks kill -s SIGKILL {id}", "E2E_TARGETS": "report", "E2E_KEEP": "1",
	}), "/src/weighstation/charts/weighstation"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubectl != "/opt/k" || c.Helm != "/opt/h" || !c.Destructive || c.PullPolicy != "IfNotPresent" || c.EnforceTargets || !c.Keep {
		t.Fatalf("%+v", c)
	}
}

func TestLoadConfigRefusesLatestThatCannotBePulled(t *testing.T) {
	_, err := LoadConfig(testEnvironment(with(map[string]string{"E2E_IMAGE_TAG": "latest"}), "/src/weighstation/charts/weighstation"))
	if err == nil || !strings.Contains(err.Error(), "must not be latest") {
		t.Fatalf("latest with Never: %v", err)
	}
	if _, err := LoadConfig(testEnvironment(with(map[string]string{"E2E_IMAGE_TAG": "latest", "E2E_PULL_POLICY": "IfNotPresent"}), "/src/weighstation/charts/weighstation")); err != nil {
		t.Fatalf("latest with IfNotPresent: %v", err)
	}
}
