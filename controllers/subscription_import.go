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

// subscriptionImportIndex and topicImportIndex index Subscriptions and
// Topics by the namespace they import from, so that an exporter's change
// requeues its importers.
const (
	subscriptionImportIndex = "spec.import.namespace"
	topicImportIndex        = "spec.import.namespace"
)

// ReasonImportNotExported is the Valid=False reason of a Subscription that
// imports what its exporter does not export to it.
const ReasonImportNotExported = "ImportNotExported"

func indexImports(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.Subscription{}, subscriptionImportIndex, func(obj client.Object) []string {
		if s, ok := obj.(*v1alpha1.Subscription); ok && s.Spec.Import != nil {
			return []string{s.Spec.Import.Namespace}
		}
		return nil
	}); err != nil {
		return err
	}
	return indexer.IndexField(ctx, &v1alpha1.Topic{}, topicImportIndex, func(obj client.Object) []string {
		if t, ok := obj.(*v1alpha1.Topic); ok && t.Spec.Import != nil {
			return []string{t.Spec.Import.Namespace}
		}
		return nil
	})
}

// topicImportProblem returns why topic's service import imports nothing,
// or "": the exporting namespace has no Subscription that exports to the
// Topic's namespace and overlaps its subject.
func topicImportProblem(ctx context.Context, c client.Reader, topic *v1alpha1.Topic) (string, error) {
	if topic.Spec.Import == nil {
		return "", nil
	}
	from := topic.Spec.Import.Namespace
	if from == topic.Namespace {
		return fmt.Sprintf("spec.import.namespace %s is this Topic's own namespace: its requests need no import; remove spec.import", from), nil
	}
	var subs v1alpha1.SubscriptionList
	if err := c.List(ctx, &subs, client.InNamespace(from), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing the Subscriptions of %s: %w", from, err)
	}
	if subjects := brokercreds.ServicesTo(topic.Namespace, string(topic.Spec.Subject), subs.Items); len(subjects) > 0 {
		return "", nil
	}
	return fmt.Sprintf("spec.import.namespace %s exports no Subscription to namespace %s whose subject overlaps %q: a Subscription there needs %s in its spec.export.namespaces; no request is routed there until then",
		from, topic.Namespace, topic.Spec.Subject, topic.Namespace), nil
}

// importersOfSubscription requeues the Topics, of any namespace, that
// import services from a Subscription's namespace.
func importersOfSubscription(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		var topics v1alpha1.TopicList
		if err := c.List(ctx, &topics, client.MatchingFields{topicImportIndex: obj.GetNamespace()}, client.UnsafeDisableDeepCopy); err != nil {
			logf.FromContext(ctx).Error(err, "listing the Topics that import from a namespace", "namespace", obj.GetNamespace())
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(topics.Items))
		for _, t := range topics.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: t.Namespace, Name: t.Name}})
		}
		return reqs
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
