package chart_test

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// webhookName is the webhook's name (controllers/webhook.Name).
const webhookName = "sidecar-injector.weighstation.io"

// The sidecar-injection webhook: its configuration calls the Service in
// front of every operator replica, on the port the operator serves it,
// never for the release's namespace or kube-system, and only for pods that
// opted in: two entries, by namespace label and by the pod's own label, as
// Istio's injector has them. The operator's flags name the configuration,
// the Service and its own image for the sidecar.
func TestWebhook(t *testing.T) {
	objs := render(t)
	cfg := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector"))
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("%d webhooks, want 2 (by namespace label, by pod label)", len(cfg.Webhooks))
	}
	// The selectors of each entry, besides the excluded namespaces.
	wantSelectors := map[string]struct {
		namespace, object metav1.LabelSelectorRequirement
	}{
		"namespace." + webhookName: {
			namespace: metav1.LabelSelectorRequirement{Key: "weighstation.io/inject", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
			object:    metav1.LabelSelectorRequirement{Key: "weighstation.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"disabled"}},
		},
		"object." + webhookName: {
			namespace: metav1.LabelSelectorRequirement{Key: "weighstation.io/inject", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"enabled"}},
			object:    metav1.LabelSelectorRequirement{Key: "weighstation.io/inject", Operator: metav1.LabelSelectorOpIn, Values: []string{"enabled"}},
		},
	}
	for _, wh := range cfg.Webhooks {
		want, ok := wantSelectors[wh.Name]
		switch {
		case !ok:
			t.Errorf("webhook name %q, want one of %v", wh.Name, slices.Sorted(maps.Keys(wantSelectors)))
			continue
		case wh.FailurePolicy == nil || *wh.FailurePolicy != admissionregistrationv1.Fail:
			t.Errorf("%s: failurePolicy %v, want Fail by default", wh.Name, wh.FailurePolicy)
		case wh.TimeoutSeconds == nil || *wh.TimeoutSeconds != 5:
			t.Errorf("%s: timeoutSeconds %v, want 5 by default", wh.Name, wh.TimeoutSeconds)
		case wh.SideEffects == nil || *wh.SideEffects != admissionregistrationv1.SideEffectClassNone:
			t.Errorf("%s: sideEffects %v, want None", wh.Name, wh.SideEffects)
		case wh.ReinvocationPolicy == nil || *wh.ReinvocationPolicy != admissionregistrationv1.IfNeededReinvocationPolicy:
			t.Errorf("%s: reinvocationPolicy %v, want IfNeeded", wh.Name, wh.ReinvocationPolicy)
		case len(wh.Rules) != 2 || !slices.Equal(wh.Rules[0].Resources, []string{"pods"}) || !slices.Equal(wh.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) ||
			!slices.Equal(wh.Rules[1].Resources, []string{"pods/ephemeralcontainers"}) || !slices.Equal(wh.Rules[1].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Update}):
			t.Errorf("%s: rules %+v, want Pod CREATE and pods/ephemeralcontainers UPDATE", wh.Name, wh.Rules)
		}
		ns := wh.NamespaceSelector.MatchExpressions
		if len(ns) != 2 || ns[0].Key != "kubernetes.io/metadata.name" || ns[0].Operator != metav1.LabelSelectorOpNotIn || !slices.Equal(ns[0].Values, []string{"mesh", "kube-system"}) ||
			!equality.Semantic.DeepEqual(ns[1], want.namespace) {
			t.Errorf("%s: namespaceSelector %+v, want kubernetes.io/metadata.name NotIn [mesh kube-system] and %+v", wh.Name, wh.NamespaceSelector, want.namespace)
		}
		if wh.ObjectSelector == nil || len(wh.ObjectSelector.MatchLabels) > 0 || len(wh.ObjectSelector.MatchExpressions) != 1 || !equality.Semantic.DeepEqual(wh.ObjectSelector.MatchExpressions[0], want.object) {
			t.Errorf("%s: objectSelector %+v, want %+v", wh.Name, wh.ObjectSelector, want.object)
		}
		if !equality.Semantic.DeepEqual(wh.ClientConfig, cfg.Webhooks[0].ClientConfig) {
			t.Errorf("%s calls %+v, %s calls %+v: want one server", wh.Name, wh.ClientConfig, cfg.Webhooks[0].Name, cfg.Webhooks[0].ClientConfig)
		}
	}
	wh := cfg.Webhooks[0]

	ref := wh.ClientConfig.Service
	if ref == nil || ref.Namespace != "mesh" || ref.Path == nil || *ref.Path != "/inject-sidecar" {
		t.Fatalf("clientConfig.service %+v, want the webhook Service in mesh, path /inject-sidecar", ref)
	}
	svc := typed[corev1.Service](t, one(t, objs, "Service", ref.Name))
	deploy := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator"))
	for k, v := range svc.Spec.Selector {
		if deploy.Spec.Template.Labels[k] != v {
			t.Errorf("webhook Service selects %s=%s, which the operator's pods lack", k, v)
		}
	}
	if _, leader := svc.Spec.Selector["weighstation.io/xds-leader"]; leader {
		t.Error("the webhook Service selects the leader alone; every replica serves the webhook")
	}
	if len(svc.Spec.Ports) != 1 || ref.Port == nil || svc.Spec.Ports[0].Port != *ref.Port || svc.Spec.Ports[0].TargetPort != intstr.FromString("webhook") {
		t.Errorf("webhook Service ports %+v, configuration port %v: want one, targetPort webhook", svc.Spec.Ports, ref.Port)
	}
	operator := deploy.Spec.Template.Spec.Containers[0]
	port := int32(0)
	for _, p := range operator.Ports {
		if p.Name == "webhook" {
			port = p.ContainerPort
		}
	}
	for _, want := range []string{
		"-webhook-configuration=" + cfg.Name,
		"-webhook-service=" + svc.Name,
		"-webhook-listen=:" + strconv.Itoa(int(port)),
		"-sidecar-image=" + operator.Image,
		"-sidecar-broker=nats://weighstation-broker.mesh.svc:4222",
		"-sidecar-operator-address=weighstation-xds.mesh.svc:9443",
		"-sidecar-memory-limit=128Mi",
		"-sidecar-memory-max=1Gi",
		"-sidecar-run-as-user=65533",
	} {
		if !slices.Contains(operator.Args, want) {
			t.Errorf("operator args lack %s: %q", want, operator.Args)
		}
	}

	t.Run("values", func(t *testing.T) {
		objs := render(t, "webhook.failurePolicy=Ignore", "webhook.timeoutSeconds=10", "webhook.namespaceSelector.matchLabels.team=shop", "sidecar.runAsUser=4242")
		for _, wh := range typed[admissionregistrationv1.MutatingWebhookConfiguration](t, one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector")).Webhooks {
			if *wh.FailurePolicy != admissionregistrationv1.Ignore || *wh.TimeoutSeconds != 10 || wh.NamespaceSelector.MatchLabels["team"] != "shop" || len(wh.NamespaceSelector.MatchExpressions) != 2 {
				t.Errorf("%s: failurePolicy %v, timeoutSeconds %v, namespaceSelector %+v", wh.Name, *wh.FailurePolicy, *wh.TimeoutSeconds, wh.NamespaceSelector)
			}
		}
		args := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "-sidecar-run-as-user=4242") {
			t.Errorf("operator args %q lack -sidecar-run-as-user=4242", args)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		objs := render(t, "webhook.enabled=false")
		for _, kind := range []string{"MutatingWebhookConfiguration", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
			if len(find(objs, kind)) != 0 {
				t.Errorf("webhook.enabled=false still renders a %s", kind)
			}
		}
		for _, s := range find(objs, "Service") {
			if strings.Contains(s.GetName(), "sidecar-injector") {
				t.Errorf("webhook.enabled=false still renders Service %s", s.GetName())
			}
		}
		args := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec.Containers[0].Args
		for _, a := range args {
			if strings.HasPrefix(a, "-webhook") || strings.HasPrefix(a, "-sidecar") {
				t.Errorf("webhook.enabled=false still passes %s", a)
			}
		}
	})
}

// checkWebhookInstalled: in the real apiserver, with nothing serving the
// webhook (failurePolicy Fail), a pod that opted in, by its namespace's
// label or its own, is refused by name; a pod that opted in neither way
// (issue 30's attack: the webhook stopped every pod in the cluster) is
// created, and so is one that opted out in an opted-in namespace, and a
// pod in the release's namespace even with the label. No other test of
// this package creates Pods.
func checkWebhookInstalled(t *testing.T, c client.Client, ns, appNS string) {
	t.Helper()
	ctx := context.Background()
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(ctx, client.ObjectKey{Name: "weighstation-sidecar-injector"}, cfg); err != nil {
		t.Fatalf("the webhook configuration: %v", err)
	}
	optedInNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "opted-in-", Labels: map[string]string{"weighstation.io/inject": "enabled"}}}
	if err := c.Create(ctx, optedInNS); err != nil {
		t.Fatal(err)
	}
	pod := func(namespace, inject string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, GenerateName: "app-"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}
		if inject != "" {
			p.Labels = map[string]string{"weighstation.io/inject": inject}
		}
		return p
	}
	for _, tc := range []struct {
		name, namespace, label string
		refusedBy              string // empty: created
	}{
		{"opted in neither way", appNS, "", ""},
		{"opted out in a namespace without the label", appNS, "disabled", ""},
		{"opted in by its label", appNS, "enabled", "object." + webhookName},
		{"opted in by its namespace's label", optedInNS.Name, "", "namespace." + webhookName},
		{"opted in by both", optedInNS.Name, "enabled", "namespace." + webhookName},
		{"opted out in an opted-in namespace", optedInNS.Name, "disabled", ""},
		{"in the release's namespace, with the label", ns, "enabled", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Create(ctx, pod(tc.namespace, tc.label))
			switch {
			case tc.refusedBy == "" && err != nil:
				t.Errorf("with no operator running: %v, want it created without the webhook", err)
			case tc.refusedBy != "" && (err == nil || !strings.Contains(err.Error(), `failed calling webhook "`+tc.refusedBy+`"`)):
				t.Errorf("with no operator running: %v, want a refusal by %s (failurePolicy Fail)", err, tc.refusedBy)
			}
		})
	}
}

// issuerRef is a cert-manager Certificate's spec.issuerRef.
type issuerRef struct{ name, kind, group string }

// certificate is what the tests read of a rendered cert-manager.io/v1
// Certificate (cert-manager's CRDs and types are not here: unstructured).
type certificate struct {
	secretName string
	dnsNames   []string
	usages     []string
	isCA       bool
	rotation   string
	issuer     issuerRef
}

func readCertificate(t *testing.T, o *unstructured.Unstructured) certificate {
	t.Helper()
	if o.GetAPIVersion() != "cert-manager.io/v1" || o.GetNamespace() != "mesh" {
		t.Errorf("Certificate %s: apiVersion %s, namespace %q; want cert-manager.io/v1 in mesh", o.GetName(), o.GetAPIVersion(), o.GetNamespace())
	}
	str := func(path ...string) string {
		v, _, _ := unstructured.NestedString(o.Object, append([]string{"spec"}, path...)...)
		return v
	}
	strs := func(path ...string) []string {
		v, _, _ := unstructured.NestedStringSlice(o.Object, append([]string{"spec"}, path...)...)
		return v
	}
	isCA, _, _ := unstructured.NestedBool(o.Object, "spec", "isCA")
	return certificate{
		secretName: str("secretName"), dnsNames: strs("dnsNames"), usages: strs("usages"), isCA: isCA,
		rotation: str("privateKey", "rotationPolicy"),
		issuer:   issuerRef{str("issuerRef", "name"), str("issuerRef", "kind"), str("issuerRef", "group")},
	}
}

// With webhook.certManager.enabled, cert-manager issues the webhook's
// serving certificate: a Certificate for the webhook Service's DNS names,
// whose Secret the operator mounts read-only and serves from
// (-webhook-cert-dir, so that it writes no caBundle), and the annotation
// by which cainjector writes the caBundle. Without an issuerRef the chart
// brings its own CA Issuer. By default there is none of it. (helm
// template only: cert-manager's CRDs are not installed here.)
func TestWebhookCertManager(t *testing.T) {
	const certDirArg = "-webhook-cert-dir"
	t.Run("default: the operator's CA", func(t *testing.T) {
		objs := render(t)
		for _, kind := range []string{"Certificate", "Issuer", "ClusterIssuer"} {
			if n := len(find(objs, kind)); n > 0 {
				t.Errorf("%d %s rendered by default, want none", n, kind)
			}
		}
		cfg := one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector")
		if a, ok := cfg.GetAnnotations()["cert-manager.io/inject-ca-from"]; ok {
			t.Errorf("the webhook configuration has cert-manager.io/inject-ca-from=%s by default: two caBundle writers", a)
		}
		spec := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec
		if slices.ContainsFunc(spec.Containers[0].Args, func(a string) bool { return strings.HasPrefix(a, certDirArg) }) {
			t.Errorf("operator args %q have %s by default: it would not write the caBundle", spec.Containers[0].Args, certDirArg)
		}
		if slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil }) {
			t.Errorf("the operator mounts a Secret by default: %+v", spec.Volumes)
		}
	})

	// checkServing checks the serving Certificate, the configuration and
	// the operator's Deployment, and returns the Certificate.
	checkServing := func(t *testing.T, objs []*unstructured.Unstructured) certificate {
		t.Helper()
		cfg := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, one(t, objs, "MutatingWebhookConfiguration", "weighstation-sidecar-injector"))
		svc := cfg.Webhooks[0].ClientConfig.Service
		if svc == nil {
			t.Fatal("the webhook configuration calls no Service")
		}
		name := "weighstation-sidecar-injector"
		cert := readCertificate(t, one(t, objs, "Certificate", name))
		if want := []string{svc.Name + "." + svc.Namespace + ".svc", svc.Name + "." + svc.Namespace + ".svc.cluster.local"}; !slices.Equal(cert.dnsNames, want) {
			t.Errorf("Certificate dnsNames %q, want %q: the names the apiserver calls the webhook Service by", cert.dnsNames, want)
		}
		if cert.secretName != "weighstation-sidecar-injector-tls" || cert.isCA || !slices.Contains(cert.usages, "server auth") {
			t.Errorf("Certificate %+v: want secretName weighstation-sidecar-injector-tls, not a CA, usage server auth", cert)
		}
		if got, want := cfg.Annotations["cert-manager.io/inject-ca-from"], "mesh/"+name; got != want {
			t.Errorf("webhook configuration annotation cert-manager.io/inject-ca-from=%q, want %q", got, want)
		}
		for _, wh := range cfg.Webhooks {
			if len(wh.ClientConfig.CABundle) > 0 {
				t.Errorf("webhook %s renders a caBundle: cainjector writes it", wh.Name)
			}
		}

		spec := typed[appsv1.Deployment](t, one(t, objs, "Deployment", "weighstation-operator")).Spec.Template.Spec
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Secret != nil && v.Secret.SecretName == cert.secretName })
		if i < 0 {
			t.Fatalf("operator volumes %+v lack the Secret %s", spec.Volumes, cert.secretName)
		}
		vol := spec.Volumes[i]
		if vol.Secret.Optional == nil || *vol.Secret.Optional || len(vol.Secret.Items) > 0 {
			t.Errorf("webhook certificate volume %+v: want optional: false, every key (tls.crt, tls.key)", vol)
		}
		operator := spec.Containers[0]
		j := slices.IndexFunc(operator.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol.Name })
		if j < 0 {
			t.Fatalf("operator mounts %+v lack volume %s", operator.VolumeMounts, vol.Name)
		}
		mount := operator.VolumeMounts[j]
		if !mount.ReadOnly || mount.SubPath != "" {
			t.Errorf("mount %+v: want read-only, the whole volume (a subPath is never updated by the kubelet)", mount)
		}
		for _, want := range []string{certDirArg + "=" + mount.MountPath, "-webhook-configuration=" + cfg.Name, "-webhook-service=" + svc.Name} {
			if !slices.Contains(operator.Args, want) {
				t.Errorf("operator args %q lack %s", operator.Args, want)
			}
		}
		return cert
	}

	t.Run("an issuer of the user's", func(t *testing.T) {
		for _, ref := range []issuerRef{
			{"internal-ca", "ClusterIssuer", "cert-manager.io"},
			{"mesh-ca", "Issuer", "cert-manager.io"},
			{"pca", "AWSPCAClusterIssuer", "awspca.cert-manager.io"},
		} {
			t.Run(ref.kind, func(t *testing.T) {
				objs := render(t, "webhook.certManager.enabled=true", "webhook.certManager.issuerRef.name="+ref.name,
					"webhook.certManager.issuerRef.kind="+ref.kind, "webhook.certManager.issuerRef.group="+ref.group)
				if cert := checkServing(t, objs); cert.issuer != ref {
					t.Errorf("Certificate issuerRef %+v, want %+v", cert.issuer, ref)
				}
				if n := len(find(objs, "Certificate")) + len(find(objs, "Issuer")); n != 1 {
					t.Errorf("%d Certificates and Issuers, want the serving Certificate alone: the chart brings no CA when an issuer is named", n)
				}
			})
		}
	})

	t.Run("the chart's own CA", func(t *testing.T) {
		objs := render(t, "webhook.certManager.enabled=true")
		serving := checkServing(t, objs)
		if serving.issuer.kind != "Issuer" || serving.issuer.group != "cert-manager.io" {
			t.Fatalf("serving Certificate issuerRef %+v, want the chart's Issuer", serving.issuer)
		}
		caIssuer := one(t, objs, "Issuer", serving.issuer.name)
		caSecret, _, _ := unstructured.NestedString(caIssuer.Object, "spec", "ca", "secretName")
		var ca certificate
		for _, o := range find(objs, "Certificate") {
			if c := readCertificate(t, o); c.secretName == caSecret {
				ca = c
			}
		}
		if !ca.isCA || ca.issuer.kind != "Issuer" || ca.issuer.group != "cert-manager.io" {
			t.Fatalf("the CA Issuer %s signs with Secret %q, whose Certificate %+v is not a CA from an Issuer", caIssuer.GetName(), caSecret, ca)
		}
		// The CA keeps its key across renewals, so that certificates it
		// signed before verify against the renewed CA.
		if ca.rotation != "Never" {
			t.Errorf("CA Certificate privateKey.rotationPolicy %q, want Never", ca.rotation)
		}
		selfSigned := one(t, objs, "Issuer", ca.issuer.name)
		if _, ok, _ := unstructured.NestedMap(selfSigned.Object, "spec", "selfSigned"); !ok {
			t.Errorf("the CA's Issuer %s is not selfSigned: %v", selfSigned.GetName(), selfSigned.Object["spec"])
		}
		if n := len(find(objs, "Issuer")); n != 2 || len(find(objs, "Certificate")) != 2 {
			t.Errorf("%d Issuers and %d Certificates, want 2 of each (self-signed and CA; CA and serving)", n, len(find(objs, "Certificate")))
		}
	})
}
