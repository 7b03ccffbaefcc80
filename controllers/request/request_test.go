package request_test

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/request"
)

// TestDispatchReadsTheKindTheRequestNames: a Topic and a Subscription of
// one name are two requests; each reads its own object, once, and a gone
// object is forgotten by its own request.
func TestDispatchReadsTheKindTheRequestNames(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	meta := metav1.ObjectMeta{Namespace: "shop", Name: "orders"}
	gets := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&v1alpha1.Topic{ObjectMeta: meta}).
		WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			gets++
			return c.Get(ctx, key, obj, opts...)
		}}).Build()
	nn := types.NamespacedName{Namespace: "shop", Name: "orders"}
	var seen []string
	var gone []request.Object
	dispatch := func(req request.Object) {
		t.Helper()
		gets = 0
		res, err := request.Dispatch(context.Background(), c, req,
			func(*v1alpha1.Subscription) (time.Duration, error) {
				seen = append(seen, "subscription")
				return 0, nil
			},
			func(*v1alpha1.Topic) (time.Duration, error) { seen = append(seen, "topic"); return time.Second, nil },
			func(o request.Object) { gone = append(gone, o) })
		if err != nil {
			t.Fatal(err)
		}
		if gets != 1 {
			t.Fatalf("%v: %d Gets, want 1", req, gets)
		}
		if req.Kind == request.Topic && res.RequeueAfter != time.Second {
			t.Fatalf("%v: requeue after %v, want the topic's 1s", req, res.RequeueAfter)
		}
	}
	dispatch(request.Object{Kind: request.Topic, NamespacedName: nn})
	dispatch(request.Object{Kind: request.Subscription, NamespacedName: nn})
	if len(seen) != 1 || seen[0] != "topic" {
		t.Fatalf("reconciled %v, want the topic alone", seen)
	}
	if len(gone) != 1 || gone[0].Kind != request.Subscription {
		t.Fatalf("forgot %v, want the subscription alone", gone)
	}
}
