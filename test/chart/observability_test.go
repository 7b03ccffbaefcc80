package chart_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// dashboardConfigMap is the chart's Grafana dashboard ConfigMap, and the
// key of its JSON.
const (
	dashboardConfigMap = "weighstation-dashboard"
	dashboardKey       = "weighstation.json"
)

// grafanaPanel is what the test reads of a dashboard panel.
type grafanaPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

// grafanaVariable is what the test reads of a dashboard's template
// variable.
type grafanaVariable struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Query any    `json:"query"`
}

// The dashboard ConfigMap: rendered by default in the release's
// namespace, labelled for Grafana's sidecar, its JSON the chart's file,
// valid, and every panel with a query on the dashboard's data source.
func TestGrafanaDashboard(t *testing.T) {
	cm := typed[corev1.ConfigMap](t, one(t, render(t), "ConfigMap", dashboardConfigMap))
	if cm.Namespace != "mesh" || cm.Labels["grafana_dashboard"] != "1" || cm.Labels["app.kubernetes.io/instance"] != "weighstation" {
		t.Errorf("ConfigMap %s/%s labels %v: want the release's namespace, grafana_dashboard: \"1\" and the chart's labels", cm.Namespace, cm.Name, cm.Labels)
	}
	data, ok := cm.Data[dashboardKey]
	if !ok || len(cm.Data) != 1 {
		t.Fatalf("ConfigMap data keys %v, want %s alone", slices.Sorted(maps.Keys(cm.Data)), dashboardKey)
	}
	file, err := os.ReadFile(filepath.Join(chartDir, "dashboards", dashboardKey))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(data) != strings.TrimSpace(string(file)) {
		t.Error("the ConfigMap's JSON is not dashboards/" + dashboardKey)
	}
	var d struct {
		Title      string         `json:"title"`
		UID        string         `json:"uid"`
		Panels     []grafanaPanel `json:"panels"`
		Templating struct {
			List []grafanaVariable `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(data), &d); err != nil {
		t.Fatalf("the dashboard is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("title %q, uid %q: want both (a fixed uid keeps links across upgrades)", d.Title, d.UID)
	}
	if !slices.ContainsFunc(d.Templating.List, func(v grafanaVariable) bool {
		return v.Name == "datasource" && v.Type == "datasource" && v.Query == "prometheus"
	}) {
		t.Errorf("variables %+v: want a Prometheus data source variable named datasource", d.Templating.List)
	}
	ids := map[int]string{}
	queries := 0
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			if prev, ok := ids[p.ID]; ok {
				t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
			}
			ids[p.ID] = p.Title
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %d %q has no query", p.ID, p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %d %q: data source %+v, want ${datasource}", p.ID, p.Title, p.Datasource)
			}
			refs := map[string]bool{}
			for _, q := range p.Targets {
				queries++
				if strings.TrimSpace(q.Expr) == "" {
					t.Errorf("panel %d %q: query %s has no expr", p.ID, p.Title, q.RefID)
				}
				if q.RefID == "" || refs[q.RefID] {
					t.Errorf("panel %d %q: refId %q empty or repeated", p.ID, p.Title, q.RefID)
				}
				refs[q.RefID] = true
			}
		}
	}
	walk(d.Panels)
	if queries == 0 {
		t.Error("the dashboard has no query")
	}
}

// grafana.dashboard's values: off, another namespace, labels and
// annotations added, the label's value replaced.
func TestGrafanaDashboardValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   []string
		check func(t *testing.T, objs []*unstructured.Unstructured)
	}{
		{"off", []string{"grafana.dashboard.enabled=false"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			for _, o := range find(objs, "ConfigMap") {
				if o.GetName() == dashboardConfigMap {
					t.Errorf("ConfigMap %s rendered with grafana.dashboard.enabled=false", dashboardConfigMap)
				}
			}
		}},
		{"another namespace", []string{"grafana.dashboard.namespace=monitoring"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			if ns := one(t, objs, "ConfigMap", dashboardConfigMap).GetNamespace(); ns != "monitoring" {
				t.Errorf("namespace %q, want monitoring", ns)
			}
		}},
		{"labels and annotations", []string{"grafana.dashboard.labels.team=mesh", "grafana.dashboard.annotations.grafana_folder=weighstation"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			cm := one(t, objs, "ConfigMap", dashboardConfigMap)
			if l := cm.GetLabels(); l["team"] != "mesh" || l["grafana_dashboard"] != "1" {
				t.Errorf("labels %v, want team=mesh beside grafana_dashboard=1", l)
			}
			if a := cm.GetAnnotations(); a["grafana_folder"] != "weighstation" {
				t.Errorf("annotations %v, want grafana_folder=weighstation", a)
			}
		}},
		{"the label's value replaced", []string{"grafana.dashboard.labels.grafana_dashboard=mesh"}, func(t *testing.T, objs []*unstructured.Unstructured) {
			if l := one(t, objs, "ConfigMap", dashboardConfigMap).GetLabels(); l["grafana_dashboard"] != "mesh" {
				t.Errorf("labels %v, want grafana_dashboard=mesh", l)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, render(t, tc.set...)) })
	}
	for _, c := range []struct {
		set, want string
	}{
		{"grafana.dashboard.enable=true", "additional properties 'enable' not allowed"},
		{"grafana.dashboard.namespace=Monitoring_NS", "/grafana/dashboard/namespace"},
		{"grafana.dashboard.enabled=yes", "/grafana/dashboard/enabled"},
	} {
		if _, err := renderErr(t, c.set); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("helm template --set %s: %v, want an error with %q", c.set, err, c.want)
		}
	}
}

// The webhook annotates the pods it injects for Prometheus as the chart
// annotates its own: the operator's -sidecar-prometheus-annotations
// follows metrics.annotations.
func TestSidecarScrapeAnnotationsFollowMetricsAnnotations(t *testing.T) {
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{nil, "-sidecar-prometheus-annotations=true"},
		{[]string{"metrics.annotations=false"}, "-sidecar-prometheus-annotations=false"},
	} {
		objs := render(t, tc.set...)
		args := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, tc.want) {
			t.Errorf("--set %v: operator args %v lack %s", tc.set, args, tc.want)
		}
	}
}
