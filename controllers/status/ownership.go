// Package status says who writes which part of a Topic's and a
// Subscription's status, and applies each writer's part alone.
//
// Each field and condition type has one owner, a server-side apply field
// manager, and each writer applies only its own part, unforced, and only
// when that part changed, so that no writer reverts another (the table in
// api/v1alpha1):
//
//	writer (package)            field manager             fields; conditions
//	TopicReconciler (topic)     FieldManagerReconciler    observedGeneration, subscriptions; Valid, Conflicting
//	SubscriptionReconciler      FieldManagerReconciler    observedGeneration; Valid, KillSwitchEngaged
//	  (subscription)
//	Propagation (propagation)   FieldManagerPropagation   config; Ready, ConfigRejected
//	Reports (reportstatus)      FieldManagerReports       aggregate, pods, dropped, killed, publish; Degraded
//	Injection (injectionstatus) FieldManagerInjection     PodsWithoutSidecar
//
// Conditions carry observedGeneration (SetCondition).
package status

import (
	"context"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// What each writer owns of each kind's status.
var (
	TopicReconciler = Ownership{
		Manager:    v1alpha1.FieldManagerReconciler,
		Fields:     []string{"observedGeneration", "subscriptions"},
		Conditions: []string{v1alpha1.ConditionValid, v1alpha1.ConditionConflicting},
	}
	SubscriptionReconciler = Ownership{
		Manager:    v1alpha1.FieldManagerReconciler,
		Fields:     []string{"observedGeneration"},
		Conditions: []string{v1alpha1.ConditionValid, v1alpha1.ConditionKillSwitchEngaged},
	}
	// Reports is the same for both kinds (a Topic has no pods, aggregate,
	// killed or Degraded; a Subscription no publish).
	Reports = Ownership{
		Manager:    v1alpha1.FieldManagerReports,
		Fields:     []string{"aggregate", "pods", "dropped", "killed", "publish"},
		Conditions: []string{v1alpha1.ConditionDegraded},
	}
	// Propagation is the same for both kinds.
	Propagation = Ownership{
		Manager:    v1alpha1.FieldManagerPropagation,
		Fields:     []string{"config"},
		Conditions: []string{v1alpha1.ConditionReady, v1alpha1.ConditionConfigRejected},
	}
	// Injection is the same for both kinds.
	Injection = Ownership{
		Manager:    v1alpha1.FieldManagerInjection,
		Conditions: []string{v1alpha1.ConditionPodsWithoutSidecar},
	}
)

// Ownership is what one writer owns of a status: top-level fields and
// condition types.
type Ownership struct {
	Manager    string
	Fields     []string
	Conditions []string
}

// Project returns the part of status (a pointer to a status struct) that
// w owns, in its JSON shape.
func (w Ownership) Project(status any) (map[string]any, error) {
	all, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return nil, err
	}
	owned := map[string]any{}
	for _, f := range w.Fields {
		if v, ok := all[f]; ok {
			owned[f] = v
		}
	}
	if conds, ok := all["conditions"].([]any); ok {
		var mine []any
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && slices.Contains(w.Conditions, fmt.Sprint(m["type"])) {
				mine = append(mine, c)
			}
		}
		if len(mine) > 0 {
			owned["conditions"] = mine
		}
	}
	return owned, nil
}

// Apply writes w's part of next to obj's status subresource with
// server-side apply, unforced, and only when it differs from w's part of
// current: each writer sends only what it owns, so none reverts another.
func (w Ownership) Apply(ctx context.Context, c client.Client, obj client.Object, gvk schema.GroupVersionKind, current, next any) error {
	before, err := w.Project(current)
	if err != nil {
		return fmt.Errorf("converting %s %s/%s status: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	after, err := w.Project(next)
	if err != nil {
		return fmt.Errorf("converting %s %s/%s status: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	if equality.Semantic.DeepEqual(before, after) {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": after}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(w.Manager)); err != nil {
		return fmt.Errorf("applying %s %s/%s status as %s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), w.Manager, err)
	}
	return nil
}

// SetCondition sets a condition with the object's generation; meta keeps
// lastTransitionTime when the status does not change.
func SetCondition(conditions *[]metav1.Condition, generation int64, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}
