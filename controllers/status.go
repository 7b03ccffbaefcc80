package controllers

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

// FieldManager is the field manager of the reconcilers' status fields.
const FieldManager = v1alpha1.FieldManagerReconciler

// setCondition sets a condition with the object's generation; meta keeps
// lastTransitionTime when the status does not change.
func setCondition(conditions *[]metav1.Condition, generation int64, condType string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(conditions, metav1.Condition{
		Type:               condType,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: generation,
	})
}

// statusOwnership is what one writer owns of a status: top-level fields
// and condition types (the table in api/v1alpha1).
type statusOwnership struct {
	manager    string
	fields     []string
	conditions []string
}

// project returns the part of status (a pointer to a status struct) that
// w owns, in its JSON shape.
func (w statusOwnership) project(status any) (map[string]any, error) {
	all, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return nil, err
	}
	owned := map[string]any{}
	for _, f := range w.fields {
		if v, ok := all[f]; ok {
			owned[f] = v
		}
	}
	if conds, ok := all["conditions"].([]any); ok {
		var mine []any
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && slices.Contains(w.conditions, fmt.Sprint(m["type"])) {
				mine = append(mine, c)
			}
		}
		if len(mine) > 0 {
			owned["conditions"] = mine
		}
	}
	return owned, nil
}

// apply writes w's part of next to obj's status subresource with
// server-side apply, unforced, and only when it differs from w's part of
// current: each writer sends only what it owns, so none reverts another.
func (w statusOwnership) apply(ctx context.Context, c client.Client, obj client.Object, gvk schema.GroupVersionKind, current, next any) error {
	before, err := w.project(current)
	if err != nil {
		return fmt.Errorf("converting %s %s/%s status: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	after, err := w.project(next)
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
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(w.manager)); err != nil {
		return fmt.Errorf("applying %s %s/%s status as %s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), w.manager, err)
	}
	return nil
}

// What the reconcilers own of each kind's status.
var (
	topicReconcilerStatus = statusOwnership{
		manager:    FieldManager,
		fields:     []string{"observedGeneration", "subscriptions"},
		conditions: []string{v1alpha1.ConditionValid, v1alpha1.ConditionConflicting},
	}
	subscriptionReconcilerStatus = statusOwnership{
		manager:    FieldManager,
		fields:     []string{"observedGeneration"},
		conditions: []string{v1alpha1.ConditionValid, v1alpha1.ConditionKillSwitchEngaged},
	}
	// reportStatus is the same for both kinds (a Topic has no pods,
	// aggregate, killed or Degraded; a Subscription no publish).
	reportStatus = statusOwnership{
		manager:    v1alpha1.FieldManagerReports,
		fields:     []string{"aggregate", "pods", "dropped", "killed", "publish"},
		conditions: []string{v1alpha1.ConditionDegraded},
	}
	// propagationStatus is the same for both kinds.
	propagationStatus = statusOwnership{
		manager:    v1alpha1.FieldManagerPropagation,
		fields:     []string{"config"},
		conditions: []string{v1alpha1.ConditionReady, v1alpha1.ConditionConfigRejected},
	}
)

type schemaGVK = schema.GroupVersionKind

func semanticEqual(a, b any) bool { return equality.Semantic.DeepEqual(a, b) }
