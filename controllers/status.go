package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// FieldManager is the server-side apply field manager of the operator.
const FieldManager = "weighstation-operator"

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

// applyStatus writes status to obj's status subresource with server-side
// apply, sending only the status (the fields this controller owns), and
// only when it differs semantically from current. Both are pointers to
// status structs.
func applyStatus(ctx context.Context, c client.Client, obj client.Object, gvk schema.GroupVersionKind, current, status any) error {
	if equality.Semantic.DeepEqual(current, status) {
		return nil
	}
	fields, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("converting %s %s/%s status: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{"status": fields}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(obj.GetNamespace())
	u.SetName(obj.GetName())
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return fmt.Errorf("applying %s %s/%s status: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}
