// Package subscription keeps what the reconcilers own of each
// Subscription's status: whether its spec is valid, and its kill switch
// set by hand.
package subscription

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/recorder"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/announce"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/imports"
	"github.com/weighstation/weighstation/controllers/status"
)

// Reconciler keeps what the reconcilers own of each Subscription's status
// (see controllers/status): whether the spec is valid, and the kill switch
// set by hand. Propagation writes how far the configuration has reached the
// sidecars; per-pod reports (delivered, dropped, latency, Degraded) are the
// report status writer's (controllers/reportstatus).
//
// It records a Warning Event when the selector is invalid, once per
// generation.
type Reconciler struct {
	client.Client
	// Recorder, if set, records the Events.
	Recorder recorder.EventRecorder

	announced announce.Memory
}

// Reasons of the Subscription conditions.
const (
	ReasonConfigured      = "Configured"
	ReasonInvalidSelector = "InvalidSelector"
	ReasonEngaged         = "Engaged"
	ReasonNotEngaged      = "NotEngaged"
)

// +kubebuilder:rbac:groups=weighstation.io,resources=subscriptions,verbs=get;list;watch
// +kubebuilder:rbac:groups=weighstation.io,resources=subscriptions/status,verbs=get;update;patch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile computes the Subscription's status and writes it if it changed.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var sub v1alpha1.Subscription
	if err := r.Get(ctx, req.NamespacedName, &sub); err != nil {
		return ctrl.Result{}, r.announced.GetFailed(req.NamespacedName, err)
	}
	importIssue, err := imports.SubscriptionProblem(ctx, r.Client, &sub)
	if err != nil {
		return ctrl.Result{}, err
	}
	next := subscriptionStatus(&sub, importIssue)
	if err := status.SubscriptionReconciler.Apply(ctx, r.Client, &sub, v1alpha1.GroupVersion.WithKind("Subscription"), &sub.Status, &next); err != nil {
		return ctrl.Result{}, err
	}
	if state := announce.InvalidState(next.Conditions, ReasonInvalidSelector); r.Recorder != nil && r.announced.News(&sub, announce.Invalid, state, announce.InvalidState(sub.Status.Conditions, ReasonInvalidSelector)) {
		r.Recorder.Eventf(&sub, nil, corev1.EventTypeWarning, announce.EventReasonInvalidSelector, announce.EventActionConfigure, "%s", state)
	}
	logf.FromContext(ctx).V(1).Info("reconciled subscription", "subject", sub.Spec.Subject)
	return ctrl.Result{}, nil
}

// subscriptionStatus computes what the reconciler owns of a
// Subscription's status: whether its spec is valid, and whether its kill
// switch is engaged by hand. How far the configuration reached the sidecars
// is propagation's (controllers/propagation).
//
// importIssue is why its import imports nothing
// (imports.SubscriptionProblem), or "".
func subscriptionStatus(sub *v1alpha1.Subscription, importIssue string) v1alpha1.SubscriptionStatus {
	next := *sub.Status.DeepCopy()
	next.ObservedGeneration = sub.Generation
	gen := sub.Generation
	if problem := desired.SubscriptionProblem(sub); problem != nil {
		// An invalid selector selects nothing (desired.Problem).
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, ReasonInvalidSelector,
			joinProblems(problem.Message()+"; the Subscription selects no pod until it is fixed", importIssue))
	} else if importIssue != "" {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, imports.ReasonNotExported, importIssue)
	} else {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionTrue, ReasonConfigured, "the policy is computed for the pods spec.selector selects")
	}
	if ks := sub.Spec.KillSwitch; ks != nil && ks.Engaged {
		msg := "delivery is stopped by hand"
		if ks.Reason != "" {
			msg += ": " + ks.Reason
		}
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionKillSwitchEngaged, metav1.ConditionTrue, ReasonEngaged, msg)
	} else {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionKillSwitchEngaged, metav1.ConditionFalse, ReasonNotEngaged, "delivery is not stopped by hand")
	}
	return next
}

// SetupWithManager registers the reconciler. What it owns of the status
// depends on the Subscription's spec and, for an import, on the exporting
// namespace's Topics, so pods do not requeue it.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		// Its own status writes do not requeue it.
		For(&v1alpha1.Subscription{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// An exporter's Topic decides whether an import is valid.
		Watches(&v1alpha1.Topic{}, imports.ImportersOfTopic(r.Client), builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("subscription").
		Complete(r)
}

// joinProblems joins the messages of a Subscription's problems.
func joinProblems(msgs ...string) string {
	var out []string
	for _, m := range msgs {
		if m != "" {
			out = append(out, m)
		}
	}
	return strings.Join(out, "; ")
}
