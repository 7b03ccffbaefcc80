package e2e

import (
	"encoding/json"
	"errors"
	"math"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// prometheusJob is what the tests read back of PrometheusConfig's job.
type prometheusJob struct {
	JobName             string `json:"job_name"`
	KubernetesSDConfigs []struct {
		Role           string `json:"role"`
		KubeconfigFile string `json:"kubeconfig_file"`
	} `json:"kubernetes_sd_configs"`
	HTTPSDConfigs []struct {
		URL             string `json:"url"`
		RefreshInterval string `json:"refresh_interval"`
	} `json:"http_sd_configs"`
	RelabelConfigs []struct {
		SourceLabels []string `json:"source_labels"`
		Action       string   `json:"action"`
		Regex        string   `json:"regex"`
		Replacement  string   `json:"replacement"`
		TargetLabel  string   `json:"target_label"`
	} `json:"relabel_configs"`
}

func TestPrometheusConfig(t *testing.T) {
	for _, tc := range []struct {
		name      string
		d         Discovery
		discovery func(prometheusJob) bool
	}{
		{"kubernetes_sd", Discovery{Kubeconfig: "/state/kubeconfig"}, func(j prometheusJob) bool {
			return len(j.KubernetesSDConfigs) == 1 && j.KubernetesSDConfigs[0].Role == "pod" && j.KubernetesSDConfigs[0].KubeconfigFile == "/state/kubeconfig" && len(j.HTTPSDConfigs) == 0
		}},
		{"http_sd", Discovery{HTTPURL: "http://127.0.0.1:4000/pods"}, func(j prometheusJob) bool {
			return len(j.HTTPSDConfigs) == 1 && j.HTTPSDConfigs[0].URL == "http://127.0.0.1:4000/pods" && j.HTTPSDConfigs[0].RefreshInterval == "2s" && len(j.KubernetesSDConfigs) == 0
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := PrometheusConfig(tc.d, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var cfg struct {
				Global struct {
					ScrapeInterval string `json:"scrape_interval"`
				} `json:"global"`
				ScrapeConfigs []prometheusJob `json:"scrape_configs"`
			}
			if err := yaml.Unmarshal(b, &cfg); err != nil {
				t.Fatalf("%v in:\n%s", err, b)
			}
			if cfg.Global.ScrapeInterval != "2s" || len(cfg.ScrapeConfigs) != 1 {
				t.Fatalf("global %+v, %d jobs; want every 2s, one job:\n%s", cfg.Global, len(cfg.ScrapeConfigs), b)
			}
			job := cfg.ScrapeConfigs[0]
			if job.JobName != PrometheusJob || !tc.discovery(job) {
				t.Errorf("job %s, discovery %+v %+v; want %s by %s", job.JobName, job.KubernetesSDConfigs, job.HTTPSDConfigs, PrometheusJob, tc.d)
			}
			checkRelabelling(t, job)
		})
	}
	for _, bad := range []Discovery{{}, {Kubeconfig: "k", HTTPURL: "http://x"}} {
		if _, err := PrometheusConfig(bad, time.Second); err == nil {
			t.Errorf("a configuration with discovery %+v was written", bad)
		}
	}
}

// checkRelabelling: what each annotation and meta label becomes.
func checkRelabelling(t *testing.T, job prometheusJob) {
	t.Helper()
	got := map[string]string{}
	for _, r := range job.RelabelConfigs {
		got[strings.Join(r.SourceLabels, ";")+" "+r.Action] = r.TargetLabel
		if r.TargetLabel == "__address__" {
			// Prometheus anchors a relabelling regex at both ends.
			re := regexp.MustCompile("^(?:" + r.Regex + ")$")
			for in, want := range map[string]string{"10.88.0.7:8080;9091": "10.88.0.7:9091", "10.88.0.7;9091": "10.88.0.7:9091"} {
				if out := re.ReplaceAllString(in, r.Replacement); out != want {
					t.Errorf("address %q becomes %q, want %q", in, out, want)
				}
			}
		}
	}
	for key, target := range map[string]string{
		"__meta_kubernetes_pod_annotation_prometheus_io_scrape keep":              "",
		"__meta_kubernetes_pod_phase drop":                                        "",
		"__meta_kubernetes_pod_annotation_prometheus_io_path replace":             "__metrics_path__",
		"__meta_kubernetes_pod_annotation_prometheus_io_scheme replace":           "__scheme__",
		"__address__;__meta_kubernetes_pod_annotation_prometheus_io_port replace": "__address__",
		"__meta_kubernetes_namespace replace":                                     "namespace",
		"__meta_kubernetes_pod_name replace":                                      "pod",
		" labelmap":                                                               "",
	} {
		if have, ok := got[key]; !ok || have != target {
			t.Errorf("no relabelling %q → %q: %v", key, target, got)
		}
	}
}

// The pod role's targets, as http_sd serves them: one per declared port
// of each container (init containers included), the pod's IP for a
// container without; the pod's labels and annotations sanitized into meta
// labels; a pod without an IP left out.
func TestPodTargetGroups(t *testing.T) {
	pod := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", UID: "u1",
			Labels:      map[string]string{"app.kubernetes.io/name": "shop"},
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9091"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "weighstation-sidecar", Ports: []corev1.ContainerPort{
				{Name: "ws-health", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}, {Name: "ws-metrics", ContainerPort: 9091, Protocol: corev1.ProtocolTCP}}}},
			Containers: []corev1.Container{{Name: "app"}},
		},
		Status: corev1.PodStatus{PodIP: "10.88.0.7", Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	pending := *pod.DeepCopy()
	pending.Name, pending.Status.PodIP = "pending", ""
	groups := PodTargetGroups([]corev1.Pod{pod, pending})
	var targets []string
	for _, g := range groups {
		targets = append(targets, g.Targets...)
		l := g.Labels
		if l["__meta_kubernetes_namespace"] != "shop" || l["__meta_kubernetes_pod_name"] != "app" || l["__meta_kubernetes_pod_phase"] != "Running" || l["__meta_kubernetes_pod_ready"] != "true" ||
			l["__meta_kubernetes_pod_annotation_prometheus_io_scrape"] != "true" || l["__meta_kubernetes_pod_annotation_prometheus_io_port"] != "9091" ||
			l["__meta_kubernetes_pod_annotationpresent_prometheus_io_port"] != "true" || l["__meta_kubernetes_pod_label_app_kubernetes_io_name"] != "shop" {
			t.Errorf("target %v: labels %v", g.Targets, l)
		}
	}
	if want := []string{"10.88.0.7:9090", "10.88.0.7:9091", "10.88.0.7"}; !slices.Equal(targets, want) {
		t.Errorf("targets %v, want %v", targets, want)
	}
	if g := groups[1].Labels; g["__meta_kubernetes_pod_container_name"] != "weighstation-sidecar" || g["__meta_kubernetes_pod_container_init"] != "true" || g["__meta_kubernetes_pod_container_port_name"] != "ws-metrics" || g["__meta_kubernetes_pod_container_port_number"] != "9091" {
		t.Errorf("the sidecar's metrics port: %v", g)
	}
	if g := groups[2].Labels; g["__meta_kubernetes_pod_container_name"] != "app" || g["__meta_kubernetes_pod_container_init"] != "false" || g["__meta_kubernetes_pod_container_port_number"] != "" {
		t.Errorf("the application's container without a port: %v", g)
	}
	// http_sd's answer is their JSON: a list of targets and labels.
	b, err := json.Marshal(groups[:1])
	if err != nil || !strings.HasPrefix(string(b), `[{"targets":["10.88.0.7:9090"],"labels":{`) {
		t.Errorf("http_sd's answer %s, %v", b, err)
	}
}

func TestPrometheusBinary(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars map[string]string
		path bool // prometheus on PATH
		want string
	}{
		{"E2E_PROMETHEUS", map[string]string{"E2E_PROMETHEUS": "/opt/prometheus"}, false, "/opt/prometheus"},
		{"on PATH", nil, true, "/usr/bin/prometheus"},
		{"nowhere", nil, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := Environment{
				Getenv: func(k string) string { return tc.vars[k] },
				LookPath: func(name string) (string, error) {
					if tc.path {
						return "/usr/bin/" + name, nil
					}
					return "", errors.New("not found")
				},
			}
			got, err := PrometheusBinary(env)
			if got != tc.want || (err != nil) != (tc.want == "") {
				t.Errorf("PrometheusBinary = %q, %v; want %q", got, err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "E2E_PROMETHEUS") {
				t.Errorf("the error %q does not name E2E_PROMETHEUS", err)
			}
		})
	}
}

func TestPrometheusArgs(t *testing.T) {
	args := PrometheusArgs("/tmp/p/prometheus.yml", "/tmp/p/data", "127.0.0.1:9999")
	for _, want := range []string{"--config.file=/tmp/p/prometheus.yml", "--storage.tsdb.path=/tmp/p/data", "--web.listen-address=127.0.0.1:9999"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
}

func TestQueryPaths(t *testing.T) {
	start := time.Unix(1700000000, 500_000_000)
	u, err := url.Parse(QueryRangePath(`sum(rate(x{a="b"}[10s]))`, start, start.Add(time.Minute), 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	if u.Path != "/api/v1/query_range" || q.Get("query") != `sum(rate(x{a="b"}[10s]))` || q.Get("start") != "1700000000.500" || q.Get("end") != "1700000060.500" || q.Get("step") != "2" {
		t.Errorf("range query %s", u)
	}
	if u, err := url.Parse(QueryPath("up == 1")); err != nil || u.Path != "/api/v1/query" || u.Query().Get("query") != "up == 1" {
		t.Errorf("instant query %s, %v", u, err)
	}
}

func TestParseAnswers(t *testing.T) {
	m, err := ParseMatrix([]byte(`{"status":"success","data":{"resultType":"matrix","result":[
		{"metric":{"subscription":"e2e-stream"},"values":[[1700000000,"1"],[1700000002,"2.5"]]},
		{"metric":{},"values":[[1700000000,"NaN"]]}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 2 || m[0].Metric["subscription"] != "e2e-stream" || len(m[0].Values) != 2 || m[0].Values[1].Value != 2.5 {
		t.Errorf("matrix %v", m)
	}
	v, err := ParseVector([]byte(`{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1700000000,"3"]}]}}`))
	if err != nil || len(v) != 1 || v[0].Value != 3 || v[0].Metric["pod"] != "a" {
		t.Errorf("vector %v, %v", v, err)
	}
	targets, err := ParseTargets([]byte(`{"status":"success","data":{"activeTargets":[{"labels":{"job":"kubernetes-pods","pod":"a"},"scrapePool":"kubernetes-pods","scrapeUrl":"http://10.0.0.1:9091/metrics","health":"up","lastError":""}],"droppedTargets":[]}}`))
	if err != nil || len(targets) != 1 || targets[0].Health != "up" || targets[0].Labels["pod"] != "a" {
		t.Errorf("targets %+v, %v", targets, err)
	}
	for name, bad := range map[string]string{
		"an error":      `{"status":"error","errorType":"bad_data","error":"parse error at char 4"}`,
		"not JSON":      `<html>`,
		"a vector":      `{"status":"success","data":{"resultType":"vector","result":[]}}`,
		"a broken list": `{"status":"success","data":{"resultType":"matrix","result":{}}}`,
	} {
		if _, err := ParseMatrix([]byte(bad)); err == nil {
			t.Errorf("%s: ParseMatrix accepted %s", name, bad)
		}
	}
	if _, err := ParseMatrix([]byte(`{"status":"error","errorType":"bad_data","error":"parse error at char 4"}`)); err == nil || !strings.Contains(err.Error(), "parse error at char 4") {
		t.Errorf("Prometheus's own error is not said: %v", err)
	}
	if _, err := ParseVector([]byte(`{"status":"success","data":{"resultType":"matrix","result":[]}}`)); err == nil {
		t.Error("ParseVector accepted a matrix")
	}
}

func TestMissingTargets(t *testing.T) {
	target := func(pod, url, health string) Target {
		return Target{Labels: map[string]string{"job": PrometheusJob, "namespace": "mesh", "pod": pod}, ScrapeURL: url, Health: health}
	}
	targets := []Target{
		target("weighstation-broker-0", "http://10.0.0.2:9092/metrics", "up"),
		target("app", "http://10.0.0.3:8080/metrics", "up"),
		target("down", "http://10.0.0.4:9091/metrics", "down"),
		{Labels: map[string]string{"job": "other", "namespace": "mesh", "pod": "elsewhere"}, ScrapeURL: "http://10.0.0.5:9091/metrics", Health: "up"},
	}
	for _, tc := range []struct {
		want    WantTarget
		missing string // what the report says; "" when found
	}{
		{WantTarget{"mesh", "weighstation-broker-0", 9092}, ""},
		{WantTarget{"mesh", "app", 9091}, "http://10.0.0.3:8080/metrics up"},
		{WantTarget{"mesh", "down", 9091}, "down"},
		{WantTarget{"mesh", "elsewhere", 9091}, "no target"},
		{WantTarget{"other", "weighstation-broker-0", 9092}, "no target"},
	} {
		got := MissingTargets([]WantTarget{tc.want}, targets, PrometheusJob)
		switch {
		case tc.missing == "" && len(got) > 0:
			t.Errorf("%s: reported missing: %v", tc.want, got)
		case tc.missing != "" && (len(got) != 1 || !strings.Contains(got[0], tc.missing) || !strings.Contains(got[0], tc.want.String())):
			t.Errorf("%s: %v, want it missing with %q", tc.want, got, tc.missing)
		}
	}
}

func TestMove(t *testing.T) {
	series := func(sub string, values ...float64) *model.SampleStream {
		s := &model.SampleStream{Metric: model.Metric{"subscription": model.LabelValue(sub)}}
		for i, v := range values {
			s.Values = append(s.Values, model.SamplePair{Timestamp: model.Time(int64(i) * 2000), Value: model.SampleValue(v)})
		}
		return s
	}
	nan := math.NaN()
	for _, tc := range []struct {
		name        string
		m           model.Matrix
		changed     bool
		label       string
		first, last float64
	}{
		{"no series", nil, false, "", 0, 0},
		{"flat", model.Matrix{series("a", 1, 1, 1)}, false, `subscription="a"`, 1, 1},
		{"up and back", model.Matrix{series("a", 0, 5, 0)}, true, `subscription="a"`, 0, 0},
		{"the one that moved most", model.Matrix{series("a", 1, 2), series("b", 0, 10)}, true, `subscription="b"`, 0, 10},
		{"NaN is no value", model.Matrix{series("a", nan, 2, nan, 2)}, false, `subscription="a"`, 2, 2},
		{"only NaN", model.Matrix{series("a", nan, nan)}, false, "", 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mv := Move(tc.m)
			if mv.Series != len(tc.m) || mv.Changed != tc.changed || mv.Label != tc.label || mv.First != tc.first || mv.Last != tc.last {
				t.Errorf("Move = %+v, want %d series, changed %v, %s %g → %g", mv, len(tc.m), tc.changed, tc.label, tc.first, tc.last)
			}
		})
	}
}
