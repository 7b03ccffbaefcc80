package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/injectionproof"
)

// The handler reads namespaces' labels (opt-in), through a metadata-only
// cache.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Name is the webhook's name; the MutatingWebhookConfiguration has two
// entries, NamespaceWebhookName and ObjectWebhookName (one per way a pod
// opts in), both ending in Name, and the apiserver names the entry in
// every refusal.
const Name = "sidecar-injector.weighstation.io"

// The configuration's entries, as Istio's injector has them: a pod opted
// in by its namespace's label goes to the first, a pod opted in by its
// own label in a namespace without it to the second, and a pod that opted
// in neither way to none, so that failurePolicy Fail holds back opted-in
// pods alone while no operator answers.
const (
	NamespaceWebhookName = "namespace." + Name
	ObjectWebhookName    = "object." + Name
)

// InjectDisabled is the pod label value (of v1alpha1.InjectLabel) that
// keeps a pod of an opted-in namespace without the sidecar: the namespace
// entry's objectSelector leaves it out, and the handler and the
// missed-injection report agree.
const InjectDisabled = "disabled"

// Path is where the server answers the webhook.
const Path = "/inject-sidecar"

// ExcludedNamespaces are the namespaces never injected, and so never
// reported for a missing sidecar: the operator's own and kube-system.
func ExcludedNamespaces(operatorNamespace string) []string {
	return []string{operatorNamespace, "kube-system"}
}

// Injector decides, for each Pod CREATE, whether the pod opted in, and
// injects the sidecar if so. It is an admission.Handler.
//
// A pod opts in by the label weighstation.io/inject: enabled on itself or
// on its namespace (where the pod's own label weighstation.io/inject:
// disabled opts it out). The configuration's two entries send only such
// pods; the Injector decides again, so that a hand-edited configuration
// injects nothing more.
//
// Every pod it injects (or finds injected, on a reinvocation) gets the
// injection proof (injectionproof.Sign), without which the operator gives
// its sidecar no configuration and no credential.
type Injector struct {
	Config Config
	// Keys gives the proof's key (the injectionproof.Keeper); pods are
	// refused (HTTP 503, failurePolicy decides) until it has one.
	Keys injectionproof.KeySource
	// Namespaces reads Namespace metadata (the manager's cache).
	Namespaces client.Reader
	// APIReader, if set, reads a namespace the cache does not hold yet: a
	// namespace and its first pods are often created together.
	APIReader client.Reader
	// Excluded are namespaces never touched (the operator's, kube-system),
	// whatever the webhook configuration's selector says.
	Excluded []string
}

// Handle implements admission.Handler.
func (i *Injector) Handle(ctx context.Context, req admission.Request) admission.Response {
	if slices.Contains(i.Excluded, req.Namespace) {
		return admission.Allowed("namespace " + req.Namespace + " is never injected")
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return admission.Errored(http.StatusBadRequest, fmt.Errorf("decoding the pod: %w", err))
	}
	if req.SubResource == "ephemeralcontainers" {
		return checkEphemeral(&pod)
	}
	in, err := i.optedIn(ctx, req.Namespace, &pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !in {
		return admission.Allowed("not opted in (label " + v1alpha1.InjectLabel + ": " + v1alpha1.InjectEnabled + " on the pod or its namespace)")
	}
	var key []byte
	if i.Keys != nil {
		key, _ = i.Keys.Key()
	}
	if len(key) == 0 {
		return admission.Errored(http.StatusServiceUnavailable, injectionproof.ErrNoKey)
	}
	changed, err := Inject(&pod, i.Config)
	if err != nil {
		return admission.Denied(err.Error())
	}
	// Signed after every change, and again on a reinvocation: another
	// webhook may have changed what the proof covers after this one.
	proof, err := injectionproof.Sign(&pod, i.Config.Audience, key)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, err)
	}
	if !changed && pod.Annotations[injectionproof.Annotation] == proof {
		return admission.Allowed("already injected")
	}
	pod.Annotations[injectionproof.Annotation] = proof
	raw, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the injected pod: %w", err))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// checkEphemeral refuses an ephemeral container (kubectl debug) that
// mounts the sidecar's token volume, or that targets the sidecar (it would
// join the sidecar's process namespace, and read its token and memory
// through /proc): the pod's spec is fixed after creation except for
// these. The chart's ValidatingAdmissionPolicy refuses the same, also
// while the operator is down.
func checkEphemeral(pod *corev1.Pod) admission.Response {
	if name, ok := mountsVolume(pod, tokenVolume); ok {
		return admission.Denied(fmt.Sprintf("%v: ephemeral container %s mounts volume %s", ErrSidecarToken, name, tokenVolume))
	}
	for i, c := range pod.Spec.EphemeralContainers {
		if c.TargetContainerName == ContainerName {
			return admission.Denied(fmt.Sprintf("spec.ephemeralContainers[%d].targetContainerName: %s (ephemeral container %s) is not allowed: it would share the sidecar's process namespace and could read its credentials through /proc; target the application's container", i, ContainerName, c.Name))
		}
	}
	return admission.Allowed("no ephemeral container mounts the sidecar's token or targets the sidecar")
}

func (i *Injector) optedIn(ctx context.Context, namespace string, pod *corev1.Pod) (bool, error) {
	switch pod.Labels[v1alpha1.InjectLabel] {
	case v1alpha1.InjectEnabled:
		return true, nil
	case InjectDisabled:
		return false, nil
	}
	ns := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}}
	key := types.NamespacedName{Name: namespace}
	err := i.Namespaces.Get(ctx, key, ns)
	if apierrors.IsNotFound(err) && i.APIReader != nil {
		err = i.APIReader.Get(ctx, key, ns)
	}
	if err != nil {
		return false, fmt.Errorf("reading the labels of namespace %s: %w", namespace, err)
	}
	return ns.Labels[v1alpha1.InjectLabel] == v1alpha1.InjectEnabled, nil
}
