package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
)

// SubscriptionReconciler keeps each Subscription's status: Ready, the kill
// switch, and how many sidecar pods it selects. Per-pod reports (delivered,
// dropped, latency) and appliedPods come from the sidecars, over xDS, in a
// later issue; until then Degraded is Unknown and appliedPods 0.
type SubscriptionReconciler struct {
	client.Client
}

// Reasons of the Subscription conditions.
const (
	ReasonConfigured      = "Configured"
	ReasonInvalidSelector = "InvalidSelector"
	ReasonEngaged         = "Engaged"
	ReasonNotEngaged      = "NotEngaged"
	ReasonNoReports       = "NoReports"
)

// +kubebuilder:rbac:groups=weighstation.io,resources=subscriptions,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=subscriptions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile computes the Subscription's status and writes it if it changed.
func (r *SubscriptionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sub v1alpha1.Subscription
	if err := r.Get(ctx, req.NamespacedName, &sub); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	pods, err := listInjectedPods(ctx, r, req.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	status, err := subscriptionStatus(&sub, pods)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := applyStatus(ctx, r.Client, &sub, v1alpha1.GroupVersion.WithKind("Subscription"), &sub.Status, &status); err != nil {
		return ctrl.Result{}, err
	}
	logf.FromContext(ctx).V(1).Info("reconciled subscription", "subject", sub.Spec.Subject, "pods", status.Config.TotalPods)
	return ctrl.Result{}, nil
}

// subscriptionStatus computes a Subscription's status from the sidecar pods
// of its namespace.
func subscriptionStatus(sub *v1alpha1.Subscription, pods []corev1.Pod) (v1alpha1.SubscriptionStatus, error) {
	status := *sub.Status.DeepCopy()
	status.ObservedGeneration = sub.Generation
	gen := sub.Generation

	version, err := policyVersion(desired.SubscriptionPolicyOf(*sub))
	if err != nil {
		return status, err
	}
	status.Config.Version = version
	status.Config.TotalPods = 0
	selector, selectorErr := metav1.LabelSelectorAsSelector(&sub.Spec.Selector)
	if selectorErr != nil {
		setCondition(&status.Conditions, gen, v1alpha1.ConditionReady, metav1.ConditionFalse, ReasonInvalidSelector, fmt.Sprintf("spec.selector: %v", selectorErr))
	} else {
		for _, p := range pods {
			if selector.Matches(labels.Set(p.Labels)) {
				status.Config.TotalPods++
			}
		}
		setCondition(&status.Conditions, gen, v1alpha1.ConditionReady, metav1.ConditionTrue, ReasonConfigured,
			fmt.Sprintf("configuration %s computed for %d sidecar pod(s)", version, status.Config.TotalPods))
	}
	if ks := sub.Spec.KillSwitch; ks != nil && ks.Engaged {
		msg := "delivery is stopped by hand"
		if ks.Reason != "" {
			msg += ": " + ks.Reason
		}
		setCondition(&status.Conditions, gen, v1alpha1.ConditionKillSwitchEngaged, metav1.ConditionTrue, ReasonEngaged, msg)
	} else {
		setCondition(&status.Conditions, gen, v1alpha1.ConditionKillSwitchEngaged, metav1.ConditionFalse, ReasonNotEngaged, "delivery is not stopped by hand")
	}
	setCondition(&status.Conditions, gen, v1alpha1.ConditionDegraded, metav1.ConditionUnknown, ReasonNoReports, "no sidecar has reported yet")
	return status, nil
}

// policyVersion is a short hash of a Subscription's policy as sidecars see
// it, so status.config.version changes exactly when their configuration
// does.
func policyVersion(p meshconfig.SubscriptionPolicy) (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("hashing subscription policy %s: %w", p.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8]), nil
}

// SetupWithManager registers the reconciler; sidecar pod changes requeue the
// Subscriptions of their namespace.
func (r *SubscriptionReconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&v1alpha1.Subscription{}).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(requeueNamespace(r, func() client.ObjectList { return &v1alpha1.SubscriptionList{} }))).
		Named("subscription").
		Complete(r)
}
