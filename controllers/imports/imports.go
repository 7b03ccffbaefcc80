// Package imports judges a Topic's or a Subscription's import from another
// namespace, and requeues the importers when an exporter changes.
package imports

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/brokercreds"
	"github.com/weighstation/weighstation/controllers/index"
)

// ReasonNotExported is the Valid=False reason of a Topic or a Subscription
// that imports what its exporter does not export to it.
const ReasonNotExported = "ImportNotExported"

// TopicProblem returns why topic's service import imports nothing,
// or "": the exporting namespace has no Subscription that exports to the
// Topic's namespace and overlaps its subject.
func TopicProblem(ctx context.Context, c client.Reader, topic *v1alpha1.Topic) (string, error) {
	return serviceImports.problem(ctx, c, topic, topic.Spec.Import, topic.Spec.Subject)
}

// SubscriptionProblem returns why sub's import imports nothing, or "": the
// exporting namespace has no Topic that exports to sub's namespace and
// overlaps its subject.
func SubscriptionProblem(ctx context.Context, c client.Reader, sub *v1alpha1.Subscription) (string, error) {
	return streamImports.problem(ctx, c, sub, sub.Spec.Import, sub.Spec.Subject)
}

// ImportersOfSubscription requeues the Topics, of any namespace, that
// import services from a Subscription's namespace.
func ImportersOfSubscription(c client.Reader) handler.EventHandler {
	return serviceImports.importersOf(c)
}

// ImportersOfTopic requeues the Subscriptions, of any namespace, that
// import from a Topic's namespace: its export may have started or stopped
// matching them.
func ImportersOfTopic(c client.Reader) handler.EventHandler {
	return streamImports.importersOf(c)
}

// importKind is one of the two imports, which differ only in kinds and
// words: a Topic's of services, which an exporting namespace's
// Subscriptions answer, and a Subscription's of streams, which its Topics
// send.
type importKind struct {
	importer, exporter string // the kinds, singular
	needsNone, until   string // what a problem says
	newImporters       func() client.ObjectList
	newExporters       func() client.ObjectList
	// exportsTo returns the subjects of exporters that export to
	// namespace and overlap subject.
	exportsTo func(exporters client.ObjectList, namespace, subject string) []string
}

var serviceImports = importKind{
	importer: "Topic", exporter: "Subscription",
	needsNone: "its requests need no import", until: "no request is routed there until then",
	newImporters: func() client.ObjectList { return &v1alpha1.TopicList{} },
	newExporters: func() client.ObjectList { return &v1alpha1.SubscriptionList{} },
	exportsTo: func(exporters client.ObjectList, namespace, subject string) []string {
		return brokercreds.ServicesTo(namespace, subject, exporters.(*v1alpha1.SubscriptionList).Items)
	},
}

var streamImports = importKind{
	importer: "Subscription", exporter: "Topic",
	needsNone: "its subjects need no import", until: "nothing is imported until then",
	newImporters: func() client.ObjectList { return &v1alpha1.SubscriptionList{} },
	newExporters: func() client.ObjectList { return &v1alpha1.TopicList{} },
	exportsTo: func(exporters client.ObjectList, namespace, subject string) []string {
		return brokercreds.ExportsTo(namespace, subject, exporters.(*v1alpha1.TopicList).Items)
	},
}

// problem returns why obj's import (imp, of subject) imports nothing, or "".
func (k importKind) problem(ctx context.Context, c client.Reader, obj client.Object, imp *v1alpha1.NamespaceRef, subject v1alpha1.SubjectPattern) (string, error) {
	if imp == nil {
		return "", nil
	}
	from, ns := imp.Namespace, obj.GetNamespace()
	if from == ns {
		return fmt.Sprintf("spec.import.namespace %s is this %s's own namespace: %s; remove spec.import", from, k.importer, k.needsNone), nil
	}
	exporters := k.newExporters()
	if err := c.List(ctx, exporters, client.InNamespace(from), client.UnsafeDisableDeepCopy); err != nil {
		return "", fmt.Errorf("listing the %ss of %s: %w", k.exporter, from, err)
	}
	if len(k.exportsTo(exporters, ns, string(subject))) > 0 {
		return "", nil
	}
	return fmt.Sprintf("spec.import.namespace %s exports no %s to namespace %s whose subject overlaps %q: a %s there needs %s in its spec.export.namespaces; %s",
		from, k.exporter, ns, subject, k.exporter, ns, k.until), nil
}

// importersOf requeues the importers, of any namespace, that import from
// the namespace of the exporter that changed.
func (k importKind) importersOf(c client.Reader) handler.EventHandler {
	return handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, obj client.Object) []reconcile.Request {
		list := k.newImporters()
		if err := c.List(ctx, list, client.MatchingFields{index.ImportNamespace: obj.GetNamespace()}, client.UnsafeDisableDeepCopy); err != nil {
			logf.FromContext(ctx).Error(err, "listing the "+k.importer+"s that import from a namespace", "namespace", obj.GetNamespace())
			return nil
		}
		reqs := make([]reconcile.Request, 0, meta.LenList(list))
		_ = meta.EachListItem(list, func(o runtime.Object) error {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o.(client.Object))})
			return nil
		})
		return reqs
	})
}
