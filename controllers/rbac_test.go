package controllers_test

import (
	"context"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// The suite's reconcilers run as a ServiceAccount with the generated RBAC
// alone, so every test here also checks that the RBAC suffices. This test
// checks that the account is not admin in disguise: what the operator
// never does is denied.
func TestOperatorRunsWithItsRBACAlone(t *testing.T) {
	ctx := context.Background()
	op, err := client.New(operatorConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	denied := []struct {
		what string
		do   func() error
	}{
		{"listing Secrets", func() error { return op.List(ctx, &corev1.SecretList{}) }},
		{"creating a Pod", func() error {
			return op.Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}},
			})
		}},
		{"patching a Pod outside its namespace", func() error {
			return op.Patch(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"}}, client.RawPatch(types.MergePatchType, []byte(`{}`)))
		}},
		{"creating a Topic", func() error {
			return op.Create(ctx, &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}, Spec: v1alpha1.TopicSpec{Subject: "a.b"}})
		}},
		{"updating a Topic's spec", func() error {
			return op.Update(ctx, &v1alpha1.Topic{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "t"}, Spec: v1alpha1.TopicSpec{Subject: "a.b"}})
		}},
		{"reading a Lease outside its namespace", func() error {
			return op.Get(ctx, client.ObjectKey{Namespace: ns, Name: "l"}, &coordinationv1.Lease{})
		}},
	}
	for _, d := range denied {
		if err := d.do(); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want Forbidden", d.what, err)
		}
	}
}
