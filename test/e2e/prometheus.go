package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The stories' Prometheus (step 6-observability): a child process of the
// test, scraping every pod that carries the prometheus.io annotations.
const (
	// PrometheusScrapeInterval is short so that a kill switch held for a
	// few seconds shows in the series.
	PrometheusScrapeInterval = 2 * time.Second
	// PrometheusJob is the one scrape job, kubernetes_sd's pod role.
	PrometheusJob = "kubernetes-pods"
	// DefaultPrometheus is looked for on PATH without E2E_PROMETHEUS
	// (Debian's package, which hack/setup-node.sh installs, puts it in
	// /usr/bin).
	DefaultPrometheus = "prometheus"
)

// PrometheusBinary is E2E_PROMETHEUS, or prometheus on PATH.
func PrometheusBinary(env Environment) (string, error) {
	return binary(env, "E2E_PROMETHEUS", DefaultPrometheus)
}

// Discovery is how the stories' Prometheus finds the pods.
type Discovery struct {
	// Kubeconfig: kubernetes_sd_configs, role pod, through the apiserver
	// of this kubeconfig.
	Kubeconfig string
	// HTTPURL: http_sd_configs at this URL, which serves what the pod role
	// would discover (PodTargetGroups): for a Prometheus built without
	// Kubernetes discovery, as Debian's is.
	HTTPURL string
}

func (d Discovery) String() string {
	if d.HTTPURL != "" {
		return "http_sd " + d.HTTPURL + " (the pod role's targets and meta labels, listed by the test)"
	}
	return "kubernetes_sd role pod, kubeconfig " + d.Kubeconfig
}

// KubernetesSDMissing is what a Prometheus built without Kubernetes
// discovery says of a configuration that uses it.
const KubernetesSDMissing = "kubernetes_sd_configs not found"

// PrometheusConfig is the stories' prometheus.yml: one job that discovers
// pods by d and keeps those annotated prometheus.io/scrape: "true",
// scraped at their prometheus.io/port and prometheus.io/path (scheme
// prometheus.io/scheme): the usual relabelling (Prometheus's own example
// configuration for Kubernetes), with the namespace and pod labels the
// chart's dashboard aggregates by. The relabelling is the same whichever
// discovery: both give the pod role's meta labels.
func PrometheusConfig(d Discovery, interval time.Duration) ([]byte, error) {
	var sd map[string]any
	switch {
	case d.Kubeconfig != "" && d.HTTPURL != "":
		return nil, errors.New("two discoveries: a kubeconfig and an HTTP URL")
	case d.Kubeconfig != "":
		sd = map[string]any{"kubernetes_sd_configs": []any{map[string]any{"role": "pod", "kubeconfig_file": d.Kubeconfig}}}
	case d.HTTPURL != "":
		sd = map[string]any{"http_sd_configs": []any{map[string]any{"url": d.HTTPURL, "refresh_interval": interval.String()}}}
	default:
		return nil, errors.New("no discovery for Prometheus: neither a kubeconfig nor an HTTP URL")
	}
	relabel := func(kv ...string) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == "source_labels" {
				m[kv[i]] = strings.Split(kv[i+1], ",")
				continue
			}
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	job := map[string]any{
		"job_name": PrometheusJob,
		"relabel_configs": []any{
			relabel("source_labels", "__meta_kubernetes_pod_annotation_prometheus_io_scrape", "action", "keep", "regex", "true"),
			// A pod that is not running has no one to scrape.
			relabel("source_labels", "__meta_kubernetes_pod_phase", "action", "drop", "regex", "Pending|Succeeded|Failed"),
			relabel("source_labels", "__meta_kubernetes_pod_annotation_prometheus_io_scheme", "action", "replace", "regex", "(https?)", "target_label", "__scheme__"),
			relabel("source_labels", "__meta_kubernetes_pod_annotation_prometheus_io_path", "action", "replace", "regex", "(.+)", "target_label", "__metrics_path__"),
			// The pod's address with the annotated port. The pod role
			// makes a target per declared container port; rewritten to
			// the one port, they are one target.
			relabel("source_labels", "__address__,__meta_kubernetes_pod_annotation_prometheus_io_port", "action", "replace",
				"regex", `([^:]+)(?::\d+)?;(\d+)`, "replacement", "$1:$2", "target_label", "__address__"),
			relabel("action", "labelmap", "regex", "__meta_kubernetes_pod_label_(.+)"),
			relabel("source_labels", "__meta_kubernetes_namespace", "action", "replace", "target_label", "namespace"),
			relabel("source_labels", "__meta_kubernetes_pod_name", "action", "replace", "target_label", "pod"),
		},
	}
	maps.Copy(job, sd)
	cfg := map[string]any{
		"global": map[string]any{
			"scrape_interval":     interval.String(),
			"scrape_timeout":      interval.String(),
			"evaluation_interval": interval.String(),
		},
		"scrape_configs": []any{job},
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding prometheus.yml: %w", err)
	}
	return out, nil
}

// TargetGroup is one group of http_sd's answer.
type TargetGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// invalidLabelChar is what Prometheus's Kubernetes discovery replaces
// with _ in a pod's label and annotation names (strutil.SanitizeLabelName).
var invalidLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// PodTargetGroups are the targets kubernetes_sd's pod role discovers from
// pods, with its meta labels (those the relabelling reads, and the pod's
// and containers' usual ones): a target per declared port of each
// container, init containers included, the pod's IP alone for a container
// without one; pods without an IP are left out, as the pod role does.
func PodTargetGroups(pods []corev1.Pod) []TargetGroup {
	var groups []TargetGroup
	for _, p := range pods {
		if p.Status.PodIP == "" {
			continue
		}
		pod := map[string]string{
			"__meta_kubernetes_namespace":     p.Namespace,
			"__meta_kubernetes_pod_name":      p.Name,
			"__meta_kubernetes_pod_ip":        p.Status.PodIP,
			"__meta_kubernetes_pod_uid":       string(p.UID),
			"__meta_kubernetes_pod_node_name": p.Spec.NodeName,
			"__meta_kubernetes_pod_host_ip":   p.Status.HostIP,
			"__meta_kubernetes_pod_phase":     string(p.Status.Phase),
			"__meta_kubernetes_pod_ready":     podReadyCondition(&p),
		}
		for k, v := range p.Labels {
			name := invalidLabelChar.ReplaceAllString(k, "_")
			pod["__meta_kubernetes_pod_label_"+name] = v
			pod["__meta_kubernetes_pod_labelpresent_"+name] = "true"
		}
		for k, v := range p.Annotations {
			name := invalidLabelChar.ReplaceAllString(k, "_")
			pod["__meta_kubernetes_pod_annotation_"+name] = v
			pod["__meta_kubernetes_pod_annotationpresent_"+name] = "true"
		}
		add := func(c corev1.Container, init bool) {
			container := maps.Clone(pod)
			container["__meta_kubernetes_pod_container_name"] = c.Name
			container["__meta_kubernetes_pod_container_image"] = c.Image
			container["__meta_kubernetes_pod_container_init"] = strconv.FormatBool(init)
			if len(c.Ports) == 0 {
				groups = append(groups, TargetGroup{Targets: []string{p.Status.PodIP}, Labels: container})
				return
			}
			for _, port := range c.Ports {
				l := maps.Clone(container)
				l["__meta_kubernetes_pod_container_port_name"] = port.Name
				l["__meta_kubernetes_pod_container_port_number"] = strconv.Itoa(int(port.ContainerPort))
				l["__meta_kubernetes_pod_container_port_protocol"] = string(port.Protocol)
				groups = append(groups, TargetGroup{Targets: []string{net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port.ContainerPort)))}, Labels: l})
			}
		}
		for _, c := range p.Spec.InitContainers {
			add(c, true)
		}
		for _, c := range p.Spec.Containers {
			add(c, false)
		}
	}
	return groups
}

// podReadyCondition is the pod's Ready condition, true, false or unknown.
func podReadyCondition(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return strings.ToLower(string(c.Status))
		}
	}
	return "unknown"
}

// PrometheusArgs are the command line of the stories' Prometheus: its
// configuration, its storage in a directory of the test's, and its HTTP
// API on listen (127.0.0.1:port: nothing outside the test's reach).
func PrometheusArgs(configFile, dataDir, listen string) []string {
	return []string{
		"--config.file=" + configFile,
		"--storage.tsdb.path=" + dataDir,
		"--storage.tsdb.retention.time=1d",
		"--web.listen-address=" + listen,
		"--log.level=info",
	}
}

// apiResponse is the envelope of Prometheus's HTTP API.
type apiResponse struct {
	Status    string          `json:"status"`
	Data      json.RawMessage `json:"data"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
}

func decodeAPI(body []byte) (json.RawMessage, error) {
	var r apiResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding Prometheus's answer %.200q: %w", body, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("Prometheus answered %s: %s: %s", r.Status, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// QueryRangePath is the API path of a range query of expr from start to
// end, every step.
func QueryRangePath(expr string, start, end time.Time, step time.Duration) string {
	v := url.Values{}
	v.Set("query", expr)
	v.Set("start", formatUnix(start))
	v.Set("end", formatUnix(end))
	v.Set("step", strconv.FormatFloat(step.Seconds(), 'f', -1, 64))
	return "/api/v1/query_range?" + v.Encode()
}

// QueryPath is the API path of an instant query of expr, now.
func QueryPath(expr string) string {
	return "/api/v1/query?" + url.Values{"query": {expr}}.Encode()
}

func formatUnix(t time.Time) string {
	return strconv.FormatFloat(float64(t.UnixNano())/1e9, 'f', 3, 64)
}

// ParseMatrix reads a range query's answer.
func ParseMatrix(body []byte) (model.Matrix, error) {
	return parseResult[model.Matrix](body, "a range query", "matrix")
}

// ParseVector reads an instant query's answer.
func ParseVector(body []byte) (model.Vector, error) {
	return parseResult[model.Vector](body, "an instant query", "vector")
}

// parseResult reads a query's answer whose result is of the type want.
func parseResult[T any](body []byte, query, want string) (T, error) {
	var result T
	data, err := decodeAPI(body)
	if err != nil {
		return result, err
	}
	var d struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return result, fmt.Errorf("decoding %s's data: %w", query, err)
	}
	if d.ResultType != want {
		return result, fmt.Errorf("%s answered a %s, want a %s", query, d.ResultType, want)
	}
	if err := json.Unmarshal(d.Result, &result); err != nil {
		return result, fmt.Errorf("decoding %s's %s: %w", query, want, err)
	}
	return result, nil
}

// Target is one of Prometheus's active scrape targets.
type Target struct {
	Labels    map[string]string `json:"labels"`
	ScrapeURL string            `json:"scrapeUrl"`
	Health    string            `json:"health"`
	LastError string            `json:"lastError"`
}

// ParseTargets reads /api/v1/targets's active targets.
func ParseTargets(body []byte) ([]Target, error) {
	data, err := decodeAPI(body)
	if err != nil {
		return nil, err
	}
	var d struct {
		ActiveTargets []Target `json:"activeTargets"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("decoding the targets: %w", err)
	}
	return d.ActiveTargets, nil
}

// WantTarget is a pod Prometheus must scrape, at port.
type WantTarget struct {
	Namespace, Pod string
	Port           int
}

func (w WantTarget) String() string { return fmt.Sprintf("%s/%s:%d", w.Namespace, w.Pod, w.Port) }

// MissingTargets are the wanted pods that no target of job scrapes, at
// their port, with health "up"; each says what was found instead.
func MissingTargets(want []WantTarget, targets []Target, job string) []string {
	var missing []string
	for _, w := range want {
		var seen []string
		ok := false
		for _, t := range targets {
			if t.Labels["job"] != job || t.Labels["namespace"] != w.Namespace || t.Labels["pod"] != w.Pod {
				continue
			}
			u, err := url.Parse(t.ScrapeURL)
			port := ""
			if err == nil {
				port = u.Port()
			}
			if port == strconv.Itoa(w.Port) && t.Health == "up" {
				ok = true
				break
			}
			seen = append(seen, fmt.Sprintf("%s %s %s", t.ScrapeURL, t.Health, t.LastError))
		}
		if ok {
			continue
		}
		if len(seen) == 0 {
			seen = []string{"no target"}
		}
		missing = append(missing, fmt.Sprintf("%s (%s)", w, strings.Join(seen, "; ")))
	}
	return missing
}

// Movement is how a query's series moved over a range.
type Movement struct {
	// Series is how many series the query returned.
	Series int
	// Changed: one of them took two different values.
	Changed bool
	// Label, First, Last, Min and Max describe the series that moved the
	// most (the first one when none moved).
	Label                 string
	First, Last, Min, Max float64
	FirstTime, LastTime   time.Time
}

// Move summarises a range query's series. NaN points (a ratio over no
// traffic) are left out: they are no value.
func Move(m model.Matrix) Movement {
	mv := Movement{Series: len(m)}
	best := -1.0
	for _, s := range m {
		var pts []model.SamplePair
		for _, p := range s.Values {
			if !math.IsNaN(float64(p.Value)) {
				pts = append(pts, p)
			}
		}
		if len(pts) == 0 {
			continue
		}
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, p := range pts {
			lo, hi = math.Min(lo, float64(p.Value)), math.Max(hi, float64(p.Value))
		}
		spread := hi - lo
		if spread > 0 {
			mv.Changed = true
		}
		if spread > best {
			best = spread
			mv.Label = seriesLabel(s.Metric)
			mv.First, mv.Last = float64(pts[0].Value), float64(pts[len(pts)-1].Value)
			mv.FirstTime, mv.LastTime = pts[0].Timestamp.Time(), pts[len(pts)-1].Timestamp.Time()
			mv.Min, mv.Max = lo, hi
		}
	}
	return mv
}

// seriesLabel is a series' labels, sorted, without braces: {} when none.
func seriesLabel(m model.Metric) string {
	if len(m) == 0 {
		return "{}"
	}
	var kv []string
	for k, v := range m {
		kv = append(kv, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(kv)
	return strings.Join(kv, ",")
}

// FormatValue prints a sample value short: 3 significant digits.
func FormatValue(v float64) string {
	return strconv.FormatFloat(v, 'g', 3, 64)
}
