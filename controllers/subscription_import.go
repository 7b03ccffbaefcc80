package controllers

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
)

// subscriptionImportIndex indexes Subscriptions by the namespace they
// import from, so that a Topic's change requeues its importers.
const subscriptionImportIndex = "spec.import.namespace"

// ReasonImportNotExported is the Valid=False reason of a Subscription that
// imports what its exporter does not export to it.
const ReasonImportNotExported = "ImportNotExported"

func indexSubscriptionsByImport(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &v1alpha1.Subscription{}, subscriptionImportIndex, func(obj client.Object) []string {
		if s, ok := obj.(*v1alpha1.Subscription); ok && s.Spec.Import != nil {
			return []string{s.Spec.Import.Namespace}
		}
		return nil
	})
}

// importProblem returns why sub's import imports nothing, or "": the
// exporting namespace has no Topic that exports to sub's namespace and
// overlaps its subject.
func importProblem(ctx context.Context, c client.Reader, sub *v1alpha1.Subscription) (string, error) {
	if sub.Spec.Import == nil {
		return "", nil
	}
	from := sub.Spec.Import.Namespace
	if from == sub.Namespace {
		return fmt.Sprintf("spec.import.namespace %s is this Subscription's own namespace: its subjects need no import; remove spec.import", from), nil
	}
	var topics v1alpha1.TopicList
	if err := c.List(ctx, &topics, client.InNamespace(from), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing the Topics of %s: %w", from, err)
	}
	if subjects := brokercreds.ExportsTo(sub.Namespace, string(sub.Spec.Subject), topics.Items); len(subjects) > 0 {
		return "", nil
	}
	return fmt.Sprintf("spec.import.namespace %s exports no Topic to namespace %s whose subject overlaps %q: a Topic there needs %s in its spec.export.namespaces; nothing is imported until then",
		from, sub.Namespace, sub.Spec.Subject, sub.Namespace), nil
}

// importersOfTopic requeues the Subscriptions, of any namespace, that
// import from a Topic's namespace: its export may have started or stopped
// matching them.
func importersOfTopic(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		var subs v1alpha1.SubscriptionList
		if err := c.List(ctx, &subs, client.MatchingFields{subscriptionImportIndex: obj.GetNamespace()}, client.UnsafeDisableDeepCopy); err != nil {
			logf.FromContext(ctx).Error(err, "listing the Subscriptions that import from a namespace", "namespace", obj.GetNamespace())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(subs.Items))
		for _, s := range subs.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: s.Namespace, Name: s.Name}})
		}
		return reqs
	})
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
