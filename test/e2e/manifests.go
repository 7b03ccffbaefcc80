package e2e

import (
	"bytes"
	"embed"
	"fmt"
	"strconv"
	"strings"
	"text/template"
)

// The stories' subjects, policy names and applications.
const (
	SubjectStream      = "e2e.stream"
	SubjectRPC         = "e2e.rpc"
	TopicE2E           = "e2e"
	SubscriptionStream = "e2e-stream" // essential: the subscriber's
	SubscriptionRPC    = "e2e-rpc"    // non-essential: the responder's, whose kill switch is pulled

	PodPublisher  = "e2e-publisher"
	PodSubscriber = "e2e-subscriber"
	PodRequester  = "e2e-requester"
	PodResponder  = "e2e-responder"
	// PodRevokeTarget is deleted to see its credential revoked.
	PodRevokeTarget = "e2e-revoke-target"
	// PodInjectCheck is created (dry run) to see the webhook mutate it,
	// and created for real after the uninstall to see it admitted.
	PodInjectCheck = "e2e-inject-check"

	// ProbeStatsPort serves a probe's /stats and /readyz; DemoControlPort
	// a demo application's control API.
	ProbeStatsPort  = 8080
	DemoControlPort = 8081

	// PublisherRate is the probe publisher's messages per second, and
	// RequestInterval/RequestTimeout the requester's pace.
	PublisherRate   = 200
	RequestInterval = "20ms"
	RequestTimeout  = "200ms"
)

// DemoApps are the demo's applications (demo/apps roles).
var DemoApps = []string{"orders-api", "billing", "spam-filter"}

//go:embed manifests/*.yaml.tmpl
var manifestFS embed.FS

var manifests = template.Must(template.New("").Funcs(template.FuncMap{"quote": strconv.Quote}).ParseFS(manifestFS, "manifests/*.yaml.tmpl"))

// ProbePod is one probe pod.
type ProbePod struct {
	Name, App, Role string
	Args            []string
	// Inject labels the pod for the sidecar (all but the pod created after
	// the uninstall, which shows the label no longer matters).
	Inject bool
	// ServiceAccount defaults to Name.
	ServiceAccount string
}

// Manifests renders the stories' objects.
type Manifests struct {
	AppNamespace string
	ProbeImage   string
	DemoImage    string
	PullPolicy   string
}

// NewManifests takes the images and namespace from c.
func NewManifests(c Config) Manifests {
	return Manifests{AppNamespace: c.AppNamespace, ProbeImage: c.ProbeImage, DemoImage: c.DemoImage, PullPolicy: c.PullPolicy}
}

func (m Manifests) render(name string, data map[string]any) (string, error) {
	data["AppNamespace"] = m.AppNamespace
	data["PullPolicy"] = m.PullPolicy
	var b bytes.Buffer
	if err := manifests.ExecuteTemplate(&b, name, data); err != nil {
		return "", fmt.Errorf("rendering %s: %w", name, err)
	}
	return b.String(), nil
}

func join(docs ...string) string {
	for i, d := range docs {
		docs[i] = strings.TrimSpace(d)
	}
	return strings.Join(docs, "\n---\n") + "\n"
}

// Namespace is the applications' namespace, labelled for injection.
func (m Manifests) Namespace() (string, error) {
	return m.render("namespace.yaml.tmpl", map[string]any{})
}

// Policy is the Topics and Subscriptions.
func (m Manifests) Policy() (string, error) {
	return m.render("policy.yaml.tmpl", map[string]any{
		"TopicE2E": TopicE2E, "SubscriptionStream": SubscriptionStream, "SubscriptionRPC": SubscriptionRPC,
		"SubjectStream": SubjectStream, "SubjectRPC": SubjectRPC,
	})
}

// Probe is one probe pod, and its ServiceAccount when it has its own.
func (m Manifests) Probe(p ProbePod) (string, error) {
	sa := p.ServiceAccount
	if sa == "" {
		sa = p.Name
	}
	pod, err := m.render("probe-pod.yaml.tmpl", map[string]any{
		"Name": p.Name, "App": p.App, "Role": p.Role, "Args": append([]string{p.Role}, p.Args...),
		"Inject": p.Inject, "ServiceAccount": sa, "Image": m.ProbeImage,
	})
	if err != nil || sa == "default" {
		return pod, err
	}
	account, err := m.render("serviceaccount.yaml.tmpl", map[string]any{"Name": sa})
	if err != nil {
		return "", err
	}
	return join(account, pod), nil
}

// StandingProbes are the four probes that run through every story.
func StandingProbes() []ProbePod {
	rate := strconv.Itoa(PublisherRate)
	return []ProbePod{
		{Name: PodSubscriber, App: PodSubscriber, Role: "subscriber", Inject: true, Args: []string{"-subject=" + SubjectStream, "-id=" + PodSubscriber}},
		{Name: PodPublisher, App: PodPublisher, Role: "publisher", Inject: true, Args: []string{"-subject=" + SubjectStream, "-rate=" + rate, "-id=" + PodPublisher}},
		{Name: PodResponder, App: PodResponder, Role: "responder", Inject: true, Args: []string{"-subject=" + SubjectRPC, "-id=" + PodResponder}},
		{Name: PodRequester, App: PodRequester, Role: "requester", Inject: true, Args: []string{"-subject=" + SubjectRPC, "-interval=" + RequestInterval, "-timeout=" + RequestTimeout, "-id=" + PodRequester}},
	}
}

// RevokeTarget is the pod whose deletion revokes its credential: a slow
// publisher, so that its sidecar holds a broker connection.
func RevokeTarget() ProbePod {
	return ProbePod{Name: PodRevokeTarget, App: PodRevokeTarget, Role: "publisher", Inject: true, Args: []string{"-subject=e2e.revoke", "-rate=1", "-id=" + PodRevokeTarget}}
}

// InjectCheck is the pod that shows whether the webhook injects: it
// connects to nothing, so it is Ready with or without a sidecar.
func InjectCheck() ProbePod {
	return ProbePod{Name: PodInjectCheck, App: PodInjectCheck, Role: "idle", Inject: true, ServiceAccount: "default"}
}

// Demo is one of the demo's applications and its ServiceAccount.
func (m Manifests) Demo(name string) (string, error) {
	account, err := m.render("serviceaccount.yaml.tmpl", map[string]any{"Name": name})
	if err != nil {
		return "", err
	}
	pod, err := m.render("demo-pod.yaml.tmpl", map[string]any{"Name": name, "Image": m.DemoImage})
	if err != nil {
		return "", err
	}
	return join(account, pod), nil
}

// Applications is every application of the apps story: the standing
// probes and the demo's three, each with its ServiceAccount.
func (m Manifests) Applications() (string, error) {
	probes, err := renderEach(StandingProbes(), m.Probe)
	if err != nil {
		return "", err
	}
	demo, err := renderEach(DemoApps, m.Demo)
	if err != nil {
		return "", err
	}
	return join(append(probes, demo...)...), nil
}

// renderEach is the manifests render makes of each of items.
func renderEach[T any](items []T, render func(T) (string, error)) ([]string, error) {
	var docs []string
	for _, item := range items {
		d, err := render(item)
		if err != nil {
			return nil, err
		}
		docs = append(docs, d)
	}
	return docs, nil
}

// ApplicationPods are the names of the pods Applications creates.
func ApplicationPods() []string {
	var names []string
	for _, p := range StandingProbes() {
		names = append(names, p.Name)
	}
	return append(names, DemoApps...)
}
