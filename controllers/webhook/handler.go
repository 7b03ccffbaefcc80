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
)

// The handler reads namespaces' labels (opt-in), through a metadata-only
// cache.
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch

// Name is the webhook's name in the MutatingWebhookConfiguration; the
// apiserver names it in every refusal.
const Name = "sidecar-injector.weighstation.io"

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
// on its namespace. The webhook configuration's selectors cannot say
// "either", so the apiserver sends every pod outside the excluded
// namespaces, and the Injector decides.
type Injector struct {
	Config Config
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
	changed, err := Inject(&pod, i.Config)
	if err != nil {
		return admission.Denied(err.Error())
	}
	if !changed {
		return admission.Allowed("already injected")
	}
	raw, err := json.Marshal(&pod)
	if err != nil {
		return admission.Errored(http.StatusInternalServerError, fmt.Errorf("encoding the injected pod: %w", err))
	}
	return admission.PatchResponseFromRaw(req.Object.Raw, raw)
}

// checkEphemeral refuses an ephemeral container (kubectl debug) that
// mounts the sidecar's token volume: the pod's spec is fixed after
// creation except for these, which may mount the pod's volumes.
func checkEphemeral(pod *corev1.Pod) admission.Response {
	if name, ok := mountsVolume(pod, tokenVolume); ok {
		return admission.Denied(fmt.Sprintf("%v: ephemeral container %s mounts volume %s", ErrSidecarToken, name, tokenVolume))
	}
	return admission.Allowed("no container mounts the sidecar's token")
}

func (i *Injector) optedIn(ctx context.Context, namespace string, pod *corev1.Pod) (bool, error) {
	if pod.Labels[v1alpha1.InjectLabel] == v1alpha1.InjectEnabled {
		return true, nil
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
