package webhook

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

func appPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "shop", Labels: map[string]string{"app": "shop"}},
		Spec: corev1.PodSpec{
			// Set, as ServiceAccount admission would (envtest has none):
			// the projected token needs it.
			ServiceAccountName: "app",
			InitContainers:     []corev1.Container{{Name: "migrate", Image: "migrate"}},
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
			Volumes:            []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}},
		},
	}
}

// checkInjected asserts, field by field, that pod carries the sidecar
// that c describes, and kept what it had (appPod's containers and volume).
// The envtest suite uses it on what the apiserver stored.
func checkInjected(t *testing.T, pod *corev1.Pod, c Config) {
	t.Helper()
	if got := pod.Labels[v1alpha1.InjectLabel]; got != v1alpha1.InjectEnabled {
		t.Errorf("label %s = %q, want %q", v1alpha1.InjectLabel, got, v1alpha1.InjectEnabled)
	}
	if got := pod.Annotations[InjectedAnnotation]; got != c.Version {
		t.Errorf("annotation %s = %q, want %q", InjectedAnnotation, got, c.Version)
	}
	// appPod has no prometheus.io annotations of its own: with c's, it is
	// scraped on the sidecar's metrics port.
	wantScrape := map[string]string{}
	if c.PrometheusAnnotations {
		wantScrape = sidecarScrape
	}
	if got := prometheusAnnotations(pod); !maps.Equal(wantScrape, got) {
		t.Errorf("prometheus.io annotations %v, want %v", got, wantScrape)
	}
	if n := len(pod.Spec.InitContainers); n != 2 || pod.Spec.InitContainers[1].Name != "migrate" {
		t.Fatalf("init containers: %d, want the sidecar first and then migrate: %+v", n, pod.Spec.InitContainers)
	}
	if len(pod.Spec.Containers) != 1 || pod.Spec.Containers[0].Name != "app" {
		t.Errorf("containers changed: %+v", pod.Spec.Containers)
	}
	s := pod.Spec.InitContainers[0]
	if s.Name != ContainerName || s.Image != c.Image {
		t.Errorf("sidecar %s image %s, want %s image %s", s.Name, s.Image, ContainerName, c.Image)
	}
	if s.RestartPolicy == nil || *s.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("restartPolicy %v, want Always (a native sidecar)", s.RestartPolicy)
	}
	if !slices.Equal(s.Command, []string{"/weighstation-sidecar"}) {
		t.Errorf("command %q", s.Command)
	}
	wantArgs := []string{
		"-listen=127.0.0.1:4222",
		"-broker=" + c.Broker,
		"-operator=" + c.Operator,
		"-identity-token-file=/var/run/secrets/weighstation.io/xds/token",
		"-ca-file=/etc/weighstation/ca/ca.crt",
		"-health-listen=:9090",
		"-metrics-listen=:9091",
	}
	if !slices.Equal(wantArgs, s.Args) {
		t.Errorf("args %q, want %q", s.Args, wantArgs)
	}
	for _, a := range s.Args {
		if strings.HasPrefix(a, "-token-file") {
			t.Errorf("the broker token must not be passed: %s", a)
		}
	}
	wantEnv := map[string]string{"POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace", "POD_UID": "metadata.uid"}
	if len(s.Env) != len(wantEnv) {
		t.Errorf("env: %+v", s.Env)
	}
	for _, e := range s.Env {
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != wantEnv[e.Name] {
			t.Errorf("env %s: %+v, want the downward API's %s", e.Name, e.ValueFrom, wantEnv[e.Name])
		}
	}
	p := s.StartupProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "ws-health" {
		t.Errorf("startupProbe %+v, want GET /readyz on ws-health", p)
	}
	ports := map[string]int32{}
	for _, cp := range s.Ports {
		ports[cp.Name] = cp.ContainerPort
	}
	if !maps.Equal(map[string]int32{"ws-health": 9090, "ws-metrics": 9091}, ports) {
		t.Errorf("ports %v, want ws-health 9090 and ws-metrics 9091", ports)
	}
	want := c.Resources
	for name, v := range map[string]struct{ got, want resource.Quantity }{
		"cpu request":    {s.Resources.Requests[corev1.ResourceCPU], want.CPURequest},
		"cpu limit":      {s.Resources.Limits[corev1.ResourceCPU], want.CPULimit},
		"memory request": {s.Resources.Requests[corev1.ResourceMemory], want.MemoryRequest},
		"memory limit":   {s.Resources.Limits[corev1.ResourceMemory], want.MemoryLimit},
	} {
		if v.got.Cmp(v.want) != 0 {
			t.Errorf("%s = %s, want %s", name, v.got.String(), v.want.String())
		}
	}
	sc := s.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no securityContext")
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Error("runAsNonRoot is not true")
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Error("readOnlyRootFilesystem is not true")
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Error("allowPrivilegeEscalation is not false")
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
		t.Errorf("capabilities %+v, want drop ALL", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("seccompProfile %+v, want RuntimeDefault", sc.SeccompProfile)
	case sc.RunAsUser == nil || *sc.RunAsUser != c.RunAsUser || sc.RunAsGroup == nil || *sc.RunAsGroup != c.RunAsUser:
		t.Errorf("runAsUser %v, runAsGroup %v, want both %d: a UID of the sidecar's own", sc.RunAsUser, sc.RunAsGroup, c.RunAsUser)
	}
	mounts := map[string]string{}
	for _, m := range s.VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	if wantMounts := map[string]string{"weighstation-xds-token": "/var/run/secrets/weighstation.io/xds", "weighstation-ca": "/etc/weighstation/ca"}; !maps.Equal(wantMounts, mounts) {
		t.Errorf("mounts %v, want %v", mounts, wantMounts)
	}
	vols := map[string]corev1.VolumeSource{}
	for _, v := range pod.Spec.Volumes {
		vols[v.Name] = v.VolumeSource
	}
	if len(vols) != 3 || vols["data"].EmptyDir == nil {
		t.Errorf("volumes: %+v, want data and the sidecar's two", pod.Spec.Volumes)
	}
	if tok := vols["weighstation-xds-token"].Projected; tok == nil || len(tok.Sources) != 1 || tok.Sources[0].ServiceAccountToken == nil {
		t.Errorf("token volume %+v, want a projected ServiceAccount token", tok)
	} else if sat := tok.Sources[0].ServiceAccountToken; sat.Audience != c.Audience || sat.ExpirationSeconds == nil || *sat.ExpirationSeconds < 600 || sat.Path != "token" {
		t.Errorf("projected token %+v, want audience %s, expiration >= 600, path token", sat, c.Audience)
	}
	if cm := vols["weighstation-ca"].ConfigMap; cm == nil || cm.Name != "weighstation-ca-bundle" {
		t.Errorf("CA volume %+v, want ConfigMap weighstation-ca-bundle", cm)
	}
}

func TestInject(t *testing.T) {
	pod := appPod()
	changed, err := Inject(pod, testConfig())
	if err != nil || !changed {
		t.Fatalf("Inject = %v, %v", changed, err)
	}
	checkInjected(t, pod, testConfig())

	// Re-invocation: the injected pod is left exactly as it is.
	again := pod.DeepCopy()
	changed, err = Inject(again, testConfig())
	if err != nil || changed {
		t.Fatalf("Inject on an injected pod = %v, %v; want unchanged", changed, err)
	}
	if !equality.Semantic.DeepEqual(pod, again) {
		t.Errorf("re-invocation changed the pod:\nbefore %+v\nafter  %+v", pod, again)
	}
}

// annotatedImpostor is a pod that writes the injector's annotation itself,
// with a container named like the sidecar that runs something else.
func annotatedImpostor() *corev1.Pod {
	p := appPod()
	p.Annotations = map[string]string{InjectedAnnotation: "v0.1.0"}
	p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: ContainerName, Image: "evil", Command: []string{"/steal"}})
	return p
}

// injectedThen injects a pod, then changes it with change: what a
// re-invocation would see if the pod had been written that way.
func injectedThen(change func(*corev1.Pod)) *corev1.Pod {
	p := appPod()
	if _, err := Inject(p, testConfig()); err != nil {
		panic(err)
	}
	change(p)
	return p
}

// isolation is appPod changed by change.
func isolation(change func(*corev1.Pod)) *corev1.Pod {
	p := appPod()
	change(p)
	return p
}

// TestInjectRefuses: pods the webhook will not inject, and why.
func TestInjectRefuses(t *testing.T) {
	// A token projected for another audience is the pod's own business.
	if changed, err := Inject(func() *corev1.Pod {
		p := appPod()
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "vault-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: "vault", Path: "token"}}},
		}}})
		return p
	}(), testConfig()); err != nil || !changed {
		t.Errorf("a pod with a token for another audience: %v, %v; want it injected", changed, err)
	}
	claimed := func(init bool) *corev1.Pod {
		p := appPod()
		ctr := corev1.Container{Name: ContainerName, Image: "evil"}
		if init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, ctr)
		} else {
			p.Spec.Containers = append(p.Spec.Containers, ctr)
		}
		return p
	}
	volume := appPod()
	volume.Spec.Volumes = append(volume.Spec.Volumes, corev1.Volume{Name: "weighstation-ca"})
	// The sidecar's token volume does not exist before injection, but a
	// container may name it in a mount, to be given it by the injection.
	mounts := func(into func(*corev1.Pod, corev1.VolumeMount)) *corev1.Pod {
		p := appPod()
		into(p, corev1.VolumeMount{Name: tokenVolume, MountPath: "/stolen"})
		return p
	}
	appMount := mounts(func(p *corev1.Pod, m corev1.VolumeMount) {
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, m)
	})
	initMount := mounts(func(p *corev1.Pod, m corev1.VolumeMount) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "setup", Image: "setup", VolumeMounts: []corev1.VolumeMount{m}})
	})
	ephemeralMount := mounts(func(p *corev1.Pod, m corev1.VolumeMount) {
		p.Spec.EphemeralContainers = append(p.Spec.EphemeralContainers, corev1.EphemeralContainer{
			EphemeralContainerCommon: corev1.EphemeralContainerCommon{Name: "debug", Image: "debug", VolumeMounts: []corev1.VolumeMount{m}}})
	})
	ownToken := func(audience string) *corev1.Pod {
		p := appPod()
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "my-token", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
			Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Audience: audience, Path: "token"}}},
		}}})
		return p
	}
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		wantErr error
	}{
		{"a sidecar-named init container it did not add", claimed(true), ErrClaimedSidecar},
		{"a sidecar-named container it did not add", claimed(false), ErrClaimedSidecar},
		{"a volume named like the sidecar's", volume, nil},
		{"an application container mounting the sidecar's token volume", appMount, ErrSidecarToken},
		{"an init container mounting the sidecar's token volume", initMount, ErrSidecarToken},
		{"an ephemeral container mounting the sidecar's token volume", ephemeralMount, ErrSidecarToken},
		{"a token projected for the sidecar's audience", ownToken(testConfig().Audience), ErrSidecarToken},
		{"the injected annotation on a sidecar of its own", annotatedImpostor(), ErrClaimedSidecar},
		{"an injected pod whose application mounts the sidecar's token", injectedThen(func(p *corev1.Pod) {
			p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: tokenVolume, MountPath: "/stolen"})
		}), ErrSidecarToken},
		{"an injected pod whose sidecar runs as the application's user", injectedThen(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext.RunAsUser = ptr.To[int64](1000)
		}), ErrClaimedSidecar},
		{"an injected pod that now shares its process namespace", injectedThen(func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }), ErrNotIsolated},
		{"shareProcessNamespace", isolation(func(p *corev1.Pod) { p.Spec.ShareProcessNamespace = ptr.To(true) }), ErrNotIsolated},
		{"hostPID", isolation(func(p *corev1.Pod) { p.Spec.HostPID = true }), ErrNotIsolated},
		{"hostNetwork", isolation(func(p *corev1.Pod) { p.Spec.HostNetwork = true }), ErrNotIsolated},
		{"an application container as the sidecar's UID", isolation(func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](DefaultRunAsUser)}
		}), ErrNotIsolated},
		{"an init container as the sidecar's UID", isolation(func(p *corev1.Pod) {
			p.Spec.InitContainers[0].SecurityContext = &corev1.SecurityContext{RunAsUser: ptr.To[int64](DefaultRunAsUser)}
		}), ErrNotIsolated},
		{"the pod as the sidecar's UID", isolation(func(p *corev1.Pod) {
			p.Spec.SecurityContext = &corev1.PodSecurityContext{RunAsUser: ptr.To[int64](DefaultRunAsUser)}
		}), ErrNotIsolated},
		{"an injected pod whose sidecar token is for another audience", injectedThen(func(p *corev1.Pod) {
			for i := range p.Spec.Volumes {
				if p.Spec.Volumes[i].Name == tokenVolume {
					p.Spec.Volumes[i].Projected.Sources[0].ServiceAccountToken.Audience = "elsewhere"
				}
			}
		}), ErrClaimedSidecar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.pod.DeepCopy()
			changed, err := Inject(tc.pod, testConfig())
			if err == nil || changed {
				t.Fatalf("Inject = %v, %v; want a refusal", changed, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if !equality.Semantic.DeepEqual(before, tc.pod) {
				t.Errorf("a refused pod was changed: %+v", tc.pod)
			}
		})
	}
}

// sidecarScrape is the prometheus.io annotations Inject adds, with
// testConfig, to a pod that has none of its own.
var sidecarScrape = map[string]string{PrometheusScrapeAnnotation: "true", PrometheusPortAnnotation: "9091", PrometheusPathAnnotation: "/metrics"}

// prometheusAnnotations are pod's prometheus.io/* annotations.
func prometheusAnnotations(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for k, v := range pod.Annotations {
		if strings.HasPrefix(k, "prometheus.io/") {
			out[k] = v
		}
	}
	return out
}

// TestInjectPrometheusAnnotations: the sidecar's scrape annotations are
// added to a pod that has none; a pod's own (its application's metrics,
// or an opt-out) are kept as they are, and nothing is added beside them:
// Prometheus's convention scrapes one port per pod.
func TestInjectPrometheusAnnotations(t *testing.T) {
	sidecar := sidecarScrape
	for _, tc := range []struct {
		name string
		own  map[string]string // the pod's annotations before injection
		off  bool              // -sidecar-prometheus-annotations=false
		want map[string]string // its prometheus.io annotations after
	}{
		{name: "none of its own: the sidecar's", want: sidecar},
		{name: "other annotations only: the sidecar's", own: map[string]string{"team": "shop"}, want: sidecar},
		{name: "the application's metrics", own: map[string]string{PrometheusScrapeAnnotation: "true", PrometheusPortAnnotation: "8080"},
			want: map[string]string{PrometheusScrapeAnnotation: "true", PrometheusPortAnnotation: "8080"}},
		{name: "the application's port alone", own: map[string]string{PrometheusPortAnnotation: "8080"},
			want: map[string]string{PrometheusPortAnnotation: "8080"}},
		{name: "the application's path alone", own: map[string]string{PrometheusPathAnnotation: "/stats"},
			want: map[string]string{PrometheusPathAnnotation: "/stats"}},
		{name: "the application's scheme alone", own: map[string]string{PrometheusSchemeAnnotation: "https"},
			want: map[string]string{PrometheusSchemeAnnotation: "https"}},
		{name: "an opt-out", own: map[string]string{PrometheusScrapeAnnotation: "false"},
			want: map[string]string{PrometheusScrapeAnnotation: "false"}},
		{name: "turned off", off: true, want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := appPod()
			pod.Annotations = maps.Clone(tc.own)
			c := testConfig()
			c.PrometheusAnnotations = !tc.off
			if changed, err := Inject(pod, c); err != nil || !changed {
				t.Fatalf("Inject = %v, %v", changed, err)
			}
			if got := prometheusAnnotations(pod); !maps.Equal(tc.want, got) {
				t.Errorf("prometheus.io annotations %v, want %v", got, tc.want)
			}
			for k, v := range tc.own {
				if pod.Annotations[k] != v {
					t.Errorf("annotation %s = %q, want the pod's own %q", k, pod.Annotations[k], v)
				}
			}
		})
	}
}

// The sidecar's UID must be a non-root user of its own: not root, and not
// distroless's nonroot, which many applications run as.
func TestConfigValidateRunAsUser(t *testing.T) {
	for _, tc := range []struct {
		uid  int64
		want string
	}{
		{DefaultRunAsUser, ""},
		{1000, ""},
		{0, "-sidecar-run-as-user must be a UID above 0"},
		{-1, "-sidecar-run-as-user must be a UID above 0"},
		{65532, "-sidecar-run-as-user must not be 65532: that is the distroless images' nonroot user"},
	} {
		c := testConfig()
		c.RunAsUser = tc.uid
		err := c.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("RunAsUser %d: Validate = %v, want %q", tc.uid, err, tc.want)
		}
	}
}
