package chart_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// typed converts a rendered object into its Go type.
func typed[T any](t *testing.T, o *unstructured.Unstructured) *T {
	t.Helper()
	v := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, v); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
	return v
}

// podSpecs are the pod templates of every workload rendered.
func podSpecs(t *testing.T, objs []*unstructured.Unstructured) map[string]corev1.PodTemplateSpec {
	t.Helper()
	specs := map[string]corev1.PodTemplateSpec{}
	for _, o := range find(objs, "Deployment") {
		specs["Deployment "+o.GetName()] = typed[appsv1.Deployment](t, o).Spec.Template
	}
	for _, o := range find(objs, "StatefulSet") {
		specs["StatefulSet "+o.GetName()] = typed[appsv1.StatefulSet](t, o).Spec.Template
	}
	for _, kind := range []string{"DaemonSet", "Job", "CronJob", "Pod", "ReplicaSet"} {
		if len(find(objs, kind)) > 0 {
			t.Errorf("the chart renders a %s, which this test does not check", kind)
		}
	}
	return specs
}

// valueSets are the configurations every structural check runs against.
var valueSets = []struct {
	name string
	set  []string
}{
	{"defaults", nil},
	{"broker cluster", []string{"broker.replicas=3", "broker.cluster.tls.enabled=false"}},
	{"broker cluster with route TLS", []string{"broker.replicas=3"}},
	{"external NATS", []string{"broker.enabled=false", "externalNATS.url=nats://nats.example:4222"}},
	{"one operator, service monitor", []string{"operator.replicas=1", "metrics.serviceMonitor.enabled=true"}},
	{"no injection webhook", []string{"webhook.enabled=false"}},
	{"broker token", []string{"webhook.enabled=false", "broker.auth.mode=token"}},
	{"cert-manager, the chart's CA", []string{"webhook.certManager.enabled=true"}},
	{"cert-manager, a ClusterIssuer", []string{"webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name=internal-ca", "webhook.certManager.issuerRef.kind=ClusterIssuer"}},
}

// Every container runs non-root, on a read-only root filesystem, with no
// capability and seccomp RuntimeDefault, within requests and limits.
func TestEveryContainerIsStrict(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			specs := podSpecs(t, render(t, vs.set...))
			if len(specs) == 0 {
				t.Fatal("no workloads rendered")
			}
			for name, tmpl := range specs {
				pod := tmpl.Spec.SecurityContext
				if pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot || pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
					t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and seccomp RuntimeDefault", name, pod)
				}
				for _, c := range append(slices.Clone(tmpl.Spec.InitContainers), tmpl.Spec.Containers...) {
					checkContainer(t, name+" container "+c.Name, c)
				}
			}
		})
	}
}

func checkContainer(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Errorf("%s: no securityContext", what)
		return
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("%s: runAsNonRoot is not true", what)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: readOnlyRootFilesystem is not true", what)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: allowPrivilegeEscalation is not false", what)
	case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities %+v, want drop [ALL] and no add", what, sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccompProfile %+v, want RuntimeDefault", what, sc.SeccompProfile)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("%s: privileged", what)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() || req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s, limit %s: want both, request <= limit", what, r, req.String(), lim.String())
		}
	}
}

// The operator's GOMEMLIMIT lies under its container's memory limit, with
// room for what the Go heap does not count; empty sets none.
func TestTheOperatorsSoftMemoryLimitIsUnderItsLimit(t *testing.T) {
	goMemLimit := func(objs []*unstructured.Unstructured) (string, resource.Quantity) {
		c := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0]
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				return e.Value, c.Resources.Limits[corev1.ResourceMemory]
			}
		}
		return "", c.Resources.Limits[corev1.ResourceMemory]
	}
	soft, limit := goMemLimit(render(t))
	bytes, err := goMemLimitBytes(soft)
	if err != nil {
		t.Fatal(err)
	}
	if ratio := float64(bytes) / float64(limit.Value()); ratio > 0.85 || ratio < 0.5 {
		t.Errorf("GOMEMLIMIT %s is %.0f%% of the memory limit %s, want 50-85%%", soft, 100*ratio, limit.String())
	}
	if soft, _ := goMemLimit(render(t, "operator.goMemLimit=")); soft != "" {
		t.Errorf("operator.goMemLimit empty still sets GOMEMLIMIT=%q", soft)
	}
}

// goMemLimitBytes parses GOMEMLIMIT's syntax: bytes with an optional
// unit B, KiB, MiB, GiB or TiB.
func goMemLimitBytes(v string) (int64, error) {
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(v, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << (10 * (4 - i)), err
		}
	}
	return strconv.ParseInt(v, 10, 64)
}

// The RBAC is config/rbac's, renamed into the release: no wildcard, no
// cluster-wide Secret, every role bound to the operator's account alone.
func TestRBACIsLeastPrivilege(t *testing.T) {
	objs := render(t)
	const account = "weighstation-operator"
	for _, o := range find(objs, "ClusterRole") {
		for _, r := range typed[rbacv1.ClusterRole](t, o).Rules {
			checkRule(t, "ClusterRole "+o.GetName(), r)
			if slices.Contains(r.Resources, "secrets") {
				t.Errorf("ClusterRole %s grants Secrets cluster-wide: %+v", o.GetName(), r)
			}
		}
	}
	roles := find(objs, "Role")
	if len(roles) == 0 {
		t.Fatal("no Role: the operator's CA Secret, Lease and own Pod need one")
	}
	for _, o := range roles {
		if o.GetNamespace() != "mesh" {
			t.Errorf("Role %s in %q, want the release's namespace", o.GetName(), o.GetNamespace())
		}
		for _, r := range typed[rbacv1.Role](t, o).Rules {
			checkRule(t, "Role "+o.GetName(), r)
		}
	}
	want := rbacv1.Subject{Kind: "ServiceAccount", Namespace: "mesh", Name: account}
	bindings := append(find(objs, "ClusterRoleBinding"), find(objs, "RoleBinding")...)
	if len(bindings) != len(find(objs, "ClusterRole"))+len(roles) {
		t.Errorf("%d bindings for %d roles", len(bindings), len(find(objs, "ClusterRole"))+len(roles))
	}
	for _, o := range bindings {
		subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
		if len(subjects) != 1 || subjects[0].(map[string]any)["name"] != want.Name || subjects[0].(map[string]any)["namespace"] != want.Namespace {
			t.Errorf("%s %s binds %v, want %+v alone", o.GetKind(), o.GetName(), subjects, want)
		}
	}
	one(t, objs, "ServiceAccount", account)
	deploy := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator"))
	if got := deploy.Spec.Template.Spec.ServiceAccountName; got != account {
		t.Errorf("the operator runs as %q, want %q", got, account)
	}
}

func checkRule(t *testing.T, what string, r rbacv1.PolicyRule) {
	t.Helper()
	for _, list := range [][]string{r.APIGroups, r.Resources, r.Verbs} {
		if slices.Contains(list, "*") {
			t.Errorf("%s: a wildcard in %+v", what, r)
		}
	}
	if len(r.NonResourceURLs) > 0 {
		t.Errorf("%s: non-resource URLs %v", what, r.NonResourceURLs)
	}
}

// The xDS Service selects the leader alone, by the label the leader puts
// on its own Pod, and the operator is told that Service's name (its
// certificate carries its DNS names).
func TestXDSServiceSelectsTheLeader(t *testing.T) {
	objs := render(t)
	svc := typed[corev1.Service](t, one(t, objs, "Service", "weighstation-xds"))
	if svc.Spec.Selector["weighstation.io/xds-leader"] != "true" || svc.Spec.Selector["app.kubernetes.io/component"] != "operator" {
		t.Errorf("xDS Service selector %v, want the operator's pods with weighstation.io/xds-leader=true", svc.Spec.Selector)
	}
	deploy := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator"))
	c := deploy.Spec.Template.Spec.Containers[0]
	for _, arg := range []string{"operator", "-xds-service=weighstation-xds", "-xds-listen=:9443", "-namespace=mesh", "-leader-elect=true"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("operator args %v lack %s", c.Args, arg)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name"
	}) {
		t.Errorf("the operator has no POD_NAME from the downward API, so it cannot label itself: %+v", c.Env)
	}
	for k, v := range deploy.Spec.Selector.MatchLabels {
		if svc.Spec.Selector[k] != v {
			t.Errorf("xDS Service selector %v lacks the Deployment's %s=%s", svc.Spec.Selector, k, v)
		}
	}
}

// The NetworkPolicy admits to the broker's client port only pods with the
// sidecar label, to the route port only brokers, and to the metrics port
// (no message) the scraper.
func TestNetworkPolicyAdmitsOnlySidecars(t *testing.T) {
	objs := render(t, "broker.replicas=3", "broker.cluster.tls.enabled=false")
	np := typed[networkingv1.NetworkPolicy](t, one(t, objs, "NetworkPolicy", "weighstation-broker"))
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || np.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "broker" {
		t.Fatalf("NetworkPolicy spec %+v, want Ingress on the brokers", np.Spec)
	}
	if len(np.Spec.Ingress) != 3 {
		t.Fatalf("%d ingress rules, want 3 (sidecars, routes, metrics)", len(np.Spec.Ingress))
	}
	sidecars, routes, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1], np.Spec.Ingress[2]
	if len(sidecars.From) != 2 || sidecars.From[0].PodSelector == nil || sidecars.From[0].NamespaceSelector == nil ||
		len(sidecars.From[0].PodSelector.MatchLabels) != 1 || sidecars.From[0].PodSelector.MatchLabels["weighstation.io/inject"] != "enabled" ||
		len(sidecars.Ports) != 1 || sidecars.Ports[0].Port.IntValue() != 4222 {
		t.Errorf("first rule %+v, want pods labelled weighstation.io/inject=enabled in any namespace, and the operator, port 4222", sidecars)
	}
	// The operator pushes revocations to the client port; only its own
	// namespace's operator pods.
	if len(sidecars.From) == 2 && (sidecars.From[1].NamespaceSelector != nil || sidecars.From[1].PodSelector == nil ||
		sidecars.From[1].PodSelector.MatchLabels["app.kubernetes.io/component"] != "operator") {
		t.Errorf("first rule's second peer %+v, want the operator's pods in the release namespace", sidecars.From[1])
	}
	if len(routes.From) != 1 || routes.From[0].NamespaceSelector != nil || routes.From[0].PodSelector.MatchLabels["app.kubernetes.io/component"] != "broker" ||
		len(routes.Ports) != 1 || routes.Ports[0].Port.IntValue() != 6222 {
		t.Errorf("second rule %+v, want the brokers alone, port 6222", routes)
	}
	if len(metrics.From) != 0 || len(metrics.Ports) != 1 || metrics.Ports[0].Port.IntValue() != 9092 {
		t.Errorf("third rule %+v, want anyone, the metrics port 9092 alone", metrics)
	}
}

// trustMounted checks that the broker mounts the trust ConfigMap the
// operator writes, or does not.
func trustMounted(want bool) func(t *testing.T, objs []*unstructured.Unstructured) {
	return func(t *testing.T, objs []*unstructured.Unstructured) {
		vols := typed[appsv1.StatefulSet](t, one(t, objs, "StatefulSet", "weighstation-broker")).Spec.Template.Spec.Volumes
		got := slices.ContainsFunc(vols, func(v corev1.Volume) bool {
			return v.ConfigMap != nil && v.ConfigMap.Name == "weighstation-broker-trust" && v.ConfigMap.Optional != nil && !*v.ConfigMap.Optional
		})
		if got != want {
			t.Errorf("the broker mounts the trust ConfigMap weighstation-broker-trust (not optional): %t, want %t (volumes %+v)", got, want, vols)
		}
	}
}

// What each configuration renders, and what it leaves out.
func TestConfigurations(t *testing.T) {
	type check func(t *testing.T, objs []*unstructured.Unstructured)
	has := func(kind, name string) check {
		return func(t *testing.T, objs []*unstructured.Unstructured) { one(t, objs, kind, name) }
	}
	none := func(kind string) check {
		return func(t *testing.T, objs []*unstructured.Unstructured) {
			if n := len(find(objs, kind)); n > 0 {
				t.Errorf("%d %s rendered, want none", n, kind)
			}
		}
	}
	// argsCheck checks a workload's first container's args: each of want
	// present, none starting with one of absent.
	argsCheck := func(what string, argsOf func(*testing.T, []*unstructured.Unstructured) []string) func(want []string, absent ...string) check {
		return func(want []string, absent ...string) check {
			return func(t *testing.T, objs []*unstructured.Unstructured) {
				args := argsOf(t, objs)
				for _, a := range want {
					if !slices.Contains(args, a) {
						t.Errorf("%s args %v lack %s", what, args, a)
					}
				}
				for _, a := range absent {
					if slices.ContainsFunc(args, func(s string) bool { return strings.HasPrefix(s, a) }) {
						t.Errorf("%s args %v have %s", what, args, a)
					}
				}
			}
		}
	}
	brokerArgs := argsCheck("broker", func(t *testing.T, objs []*unstructured.Unstructured) []string {
		return typed[appsv1.StatefulSet](t, one(t, objs, "StatefulSet", "weighstation-broker")).Spec.Template.Spec.Containers[0].Args
	})
	operatorArgs := argsCheck("operator", func(t *testing.T, objs []*unstructured.Unstructured) []string {
		return typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Args
	})
	// routeTLSMounted checks that the brokers mount the route certificate
	// Secret, read-only and required, where their flags point, or not at
	// all.
	routeTLSMounted := func(want bool) check {
		return func(t *testing.T, objs []*unstructured.Unstructured) {
			spec := typed[appsv1.StatefulSet](t, one(t, objs, "StatefulSet", "weighstation-broker")).Spec.Template.Spec
			i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool {
				return v.Secret != nil && v.Secret.SecretName == "weighstation-broker-routes-tls"
			})
			if !want {
				if i >= 0 {
					t.Errorf("the brokers mount the route certificate Secret: %+v", spec.Volumes[i])
				}
				return
			}
			if i < 0 {
				t.Fatalf("broker volumes %+v lack the Secret weighstation-broker-routes-tls", spec.Volumes)
			}
			vol := spec.Volumes[i]
			if vol.Secret.Optional == nil || *vol.Secret.Optional {
				t.Errorf("route TLS volume %+v: want optional: false, so that no broker runs without it", vol)
			}
			mounts := spec.Containers[0].VolumeMounts
			if !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool {
				return m.Name == vol.Name && m.ReadOnly && m.MountPath == "/etc/weighstation/routes-tls"
			}) {
				t.Errorf("broker mounts %+v: want %s read-only at /etc/weighstation/routes-tls", mounts, vol.Name)
			}
		}
	}
	scraped := func(t *testing.T, objs []*unstructured.Unstructured) {
		a := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Annotations
		if a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "8080" {
			t.Errorf("operator pod annotations %v, want prometheus.io/scrape on 8080", a)
		}
		broker := typed[appsv1.StatefulSet](t, one(t, objs, "StatefulSet", "weighstation-broker")).Spec.Template
		if a := broker.Annotations; a["prometheus.io/scrape"] != "true" || a["prometheus.io/port"] != "9092" {
			t.Errorf("broker pod annotations %v, want prometheus.io/scrape on 9092", a)
		}
		c := broker.Spec.Containers[0]
		if !slices.Contains(c.Args, "-metrics-listen=:9092") || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
			t.Errorf("broker args %v, readiness probe %+v: want /metrics and /healthz served on 9092, the probe on /healthz", c.Args, c.ReadinessProbe)
		}
	}
	kept := func(t *testing.T, objs []*unstructured.Unstructured) {
		crds := find(objs, "CustomResourceDefinition")
		if len(crds) != 2 {
			t.Fatalf("%d CRDs, want Topic and Subscription", len(crds))
		}
		for _, crd := range crds {
			if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
				t.Errorf("CRD %s is not kept on uninstall: %v", crd.GetName(), crd.GetAnnotations())
			}
		}
	}
	noHooks := func(t *testing.T, objs []*unstructured.Unstructured) {
		for _, o := range objs {
			if _, ok := o.GetAnnotations()["helm.sh/hook"]; ok {
				t.Errorf("%s %s is a hook", o.GetKind(), o.GetName())
			}
		}
	}
	routes := "-routes=" + strings.Join([]string{
		"nats://weighstation-broker-0.weighstation-broker-routes.mesh.svc:6222",
		"nats://weighstation-broker-1.weighstation-broker-routes.mesh.svc:6222",
		"nats://weighstation-broker-2.weighstation-broker-routes.mesh.svc:6222",
	}, ",")
	cases := []struct {
		name   string
		set    []string
		checks []check
	}{
		{"defaults", nil, []check{
			kept, noHooks, scraped,
			has("PodDisruptionBudget", "weighstation-operator"), none("Secret"),
			has("Service", "weighstation-broker"), has("Service", "weighstation-broker-routes"), has("Service", "weighstation-operator-metrics"),
			has("ServiceAccount", "weighstation-broker"), has("NetworkPolicy", "weighstation-broker"),
			none("ServiceMonitor"), brokerArgs([]string{"broker", "-listen=0.0.0.0:4222", "-trust-dir=/etc/weighstation/broker-trust"}, "-routes", "-cluster-listen", "-cluster-tls-", "-token-file"),
			// One broker has no routes, so no route certificate.
			routeTLSMounted(false),
			// The operator issues each sidecar its broker credential and
			// pushes revocations to the brokers.
			operatorArgs([]string{"-broker-url=nats://weighstation-broker.mesh.svc:4222", "-broker-credential-lifetime=1h", "-broker-max-revocations=5000", "-broker-account-max-connections=2000", "-broker-user-max-subscriptions=50000"}, "-broker-routes-service"),
			trustMounted(true),
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if n := len(find(objs, "PodDisruptionBudget")); n != 1 {
					t.Errorf("%d PDBs, want the operator's alone (one broker)", n)
				}
			},
		}},
		{"broker cluster", []string{"broker.replicas=3"}, []check{
			has("PodDisruptionBudget", "weighstation-broker"),
			brokerArgs([]string{"-cluster-listen=0.0.0.0:6222", "-cluster-name=weighstation", routes,
				"-cluster-tls-cert=/etc/weighstation/routes-tls/tls.crt",
				"-cluster-tls-key=/etc/weighstation/routes-tls/tls.key",
				"-cluster-tls-ca=/etc/weighstation/routes-tls/ca.crt"}),
			routeTLSMounted(true), operatorArgs([]string{"-broker-routes-service=weighstation-broker-routes"}),
		}},
		{"broker cluster without route TLS", []string{"broker.replicas=3", "broker.cluster.tls.enabled=false"}, []check{
			brokerArgs([]string{"-cluster-listen=0.0.0.0:6222", routes}, "-cluster-tls-"),
			routeTLSMounted(false), operatorArgs(nil, "-broker-routes-service"),
		}},
		{"external NATS", []string{"broker.enabled=false", "externalNATS.url=nats://nats.example:4222"}, []check{
			kept, none("StatefulSet"), none("Secret"),
			// No broker's NetworkPolicy; the operator's xDS one stays.
			func(t *testing.T, objs []*unstructured.Unstructured) {
				if nps := find(objs, "NetworkPolicy"); len(nps) != 1 || nps[0].GetName() != "weighstation-xds" {
					t.Errorf("%d NetworkPolicies rendered, want the operator's weighstation-xds alone", len(nps))
				}
			},
			has("Deployment", "weighstation-operator"), has("Service", "weighstation-xds"),
		}},
		{"broker token", []string{"webhook.enabled=false", "broker.auth.mode=token"}, []check{
			has("Secret", "weighstation-broker-token"), trustMounted(false),
			brokerArgs([]string{"-token-file=/etc/weighstation/broker/token"}, "-trust-dir"), operatorArgs(nil, "-broker-url"),
		}},
		{"existing token Secret", []string{"webhook.enabled=false", "broker.auth.mode=token", "broker.auth.existingSecret=mine"}, []check{
			none("Secret"),
			func(t *testing.T, objs []*unstructured.Unstructured) {
				vols := typed[appsv1.StatefulSet](t, one(t, objs, "StatefulSet", "weighstation-broker")).Spec.Template.Spec.Volumes
				if !slices.ContainsFunc(vols, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == "mine" }) {
					t.Errorf("broker volumes %+v do not mount Secret mine", vols)
				}
			},
		}},
		{"service monitor", []string{"metrics.serviceMonitor.enabled=true"}, []check{has("ServiceMonitor", "weighstation-operator"), has("ServiceMonitor", "weighstation-broker")}},
		{"one operator", []string{"operator.replicas=1"}, []check{none("PodDisruptionBudget")}},
		{"no CRDs", []string{"crds.enabled=false"}, []check{none("CustomResourceDefinition")}},
		{"operator resources", []string{"operator.resources.limits.memory=1Gi"}, []check{
			func(t *testing.T, objs []*unstructured.Unstructured) {
				got := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory]
				if got.Cmp(resource.MustParse("1Gi")) != 0 {
					t.Errorf("operator memory limit %s, want 1Gi", got.String())
				}
			},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			objs := render(t, c.set...)
			for _, check := range c.checks {
				check(t, objs)
			}
		})
	}
}

// values.schema.json and the chart's own checks refuse bad values, and
// say which value and why.
func TestBadValuesAreRefused(t *testing.T) {
	cases := []struct {
		set  []string
		want string
	}{
		{[]string{"operator.replicas=0"}, "/operator/replicas"},
		{[]string{"operator.replica=2"}, "additional properties 'replica' not allowed"},
		{[]string{"image.pullPolicy=Sometimes"}, "/image/pullPolicy"},
		{[]string{"operator.leaderElection.leaseDuration=fifteen"}, "/operator/leaderElection/leaseDuration"},
		{[]string{"operator.xds.port=70000"}, "/operator/xds/port"},
		{[]string{"operator.resources.limits=null"}, "missing property 'limits'"},
		{[]string{"broker.maxPayload=0"}, "/broker/maxPayload"},
		{[]string{"externalNATS.url=http://nats:4222", "broker.enabled=false"}, "/externalNATS/url"},
		{[]string{"broker.enabled=false"}, "externalNATS.url is empty"},
		{[]string{"externalNATS.url=nats://nats:4222"}, "set broker.enabled=false"},
		{[]string{"broker.maxPending=1000"}, "broker.maxPending must be at least broker.maxPayload"},
		{[]string{"broker.extraArgs={token}"}, "/broker/extraArgs/0"},
		{[]string{"operator.goMemLimit=400MB"}, "/operator/goMemLimit"},
		{[]string{"webhook.failurePolicy=Sometimes"}, "/webhook/failurePolicy"},
		{[]string{"webhook.timeoutSeconds=31"}, "/webhook/timeoutSeconds"},
		{[]string{"sidecar.tokenExpirationSeconds=300"}, "/sidecar/tokenExpirationSeconds"},
		{[]string{"sidecar.runAsUser=0"}, "/sidecar/runAsUser"},
		{[]string{"sidecar.runAsUser=65532"}, "/sidecar/runAsUser"},
		{[]string{"sidecar.resources.limits.memory=lots"}, "/sidecar/resources/limits/memory"},
		{[]string{"sidecar.resourceBounds.cpu.max=null"}, "missing property 'max'"},
		{[]string{"webhook.certManager.enable=true"}, "additional properties 'enable' not allowed"},
		{[]string{"webhook.certManager.enabled=true", "webhook.enabled=false"}, "webhook.certManager.enabled is true but webhook.enabled is false"},
		{[]string{"webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name=ca", "webhook.certManager.issuerRef.kind=CAIssuer"},
			`webhook.certManager.issuerRef.kind must be Issuer or ClusterIssuer for group cert-manager.io, not "CAIssuer"`},
		{[]string{"webhook.certManager.issuerRef.kind=issuer"}, "/webhook/certManager/issuerRef/kind"},
		{[]string{"webhook.certManager.issuerRef.name=My_CA"}, "/webhook/certManager/issuerRef/name"},
		{[]string{"webhook.certManager.issuerRef.group="}, "/webhook/certManager/issuerRef/group"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.set, ","), func(t *testing.T) {
			_, err := renderErr(t, c.set...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("helm template --set %v: %v, want an error with %q", c.set, err, c.want)
			}
		})
	}
}

// kubeVersion refuses clusters without native sidecars (1.29) or
// ValidatingAdmissionPolicy v1 (1.30), which the chart's
// sidecar-integrity policy is.
func TestKubeVersion(t *testing.T) {
	for _, c := range []struct {
		version string
		ok      bool
	}{{"1.28.9", false}, {"1.29.9", false}, {"1.30.0", true}, {"1.37.0", true}} {
		_, err := helm(t, nil, "template", "weighstation", chartDir, "--kube-version", c.version)
		if (err == nil) != c.ok {
			t.Errorf("Kubernetes %s: %v, want ok=%v", c.version, err, c.ok)
		}
	}
}

// helm lint is clean, with --strict, for every value set.
func TestLint(t *testing.T) {
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			args := []string{"lint", chartDir, "--strict"}
			for _, s := range vs.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, nil, args...)
			if err != nil || !strings.Contains(out, "0 chart(s) failed") || strings.Contains(out, "[WARNING]") || strings.Contains(out, "[ERROR]") {
				t.Errorf("helm lint: %v\n%s", err, out)
			}
		})
	}
}
