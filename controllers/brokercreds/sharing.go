package brokercreds

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/jwt/v2"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/matcher"
)

// Sharing is what one namespace's account shares with others: streams
// (a Topic's spec.export, a Subscription's spec.import matched with the
// exporter's Topics that export to it) and services (a Subscription's
// spec.export, a Topic's spec.import matched with the exporter's
// Subscriptions that export to it).
type Sharing struct {
	// Exports are the exported subjects, each to the namespaces named.
	Exports []Export
	// Imports are the imported subjects.
	Imports []Import
}

// Export is one exported subject and who may import it.
type Export struct {
	Subject    string
	Service    bool // a service (requests in, replies out), else a stream
	Namespaces []string
}

// Import is one subject imported from a namespace.
type Import struct {
	Namespace, Subject string
	Service            bool
}

// ExportsTo returns the subjects of exporter's Topics (topics) that
// export to namespace and overlap subject: what a Subscription of
// namespace with that subject imports from exporter. None: the import is
// not exported (the Subscription is Valid=False).
func ExportsTo(namespace, subject string, topics []v1alpha1.Topic) []string {
	return exportedTo(namespace, subject, topics, func(t *v1alpha1.Topic) (v1alpha1.SubjectPattern, *v1alpha1.Export) {
		return t.Spec.Subject, t.Spec.Export
	})
}

// ServicesTo returns the subjects of exporter's Subscriptions (subs) that
// export to namespace and overlap subject: what a Topic of namespace with
// that subject imports from exporter as services. None: the import is not
// exported (the Topic is Valid=False).
func ServicesTo(namespace, subject string, subs []v1alpha1.Subscription) []string {
	return exportedTo(namespace, subject, subs, func(s *v1alpha1.Subscription) (v1alpha1.SubjectPattern, *v1alpha1.Export) {
		return s.Spec.Subject, s.Spec.Export
	})
}

// exportedTo is ExportsTo and ServicesTo: spec gives an exporter's subject
// and export.
func exportedTo[T any](namespace, subject string, exporters []T, spec func(*T) (v1alpha1.SubjectPattern, *v1alpha1.Export)) []string {
	var out []string
	for i := range exporters {
		pattern, export := spec(&exporters[i])
		if export == nil || !slices.Contains(export.Namespaces, namespace) {
			continue
		}
		if matcher.Overlaps(string(pattern), subject) && !slices.Contains(out, string(pattern)) {
			out = append(out, string(pattern))
		}
	}
	slices.Sort(out)
	return out
}

// SharingOf reads namespace's sharing from c (the operator's cache).
func SharingOf(ctx context.Context, c client.Reader, namespace string) (Sharing, error) {
	var s Sharing
	var topics v1alpha1.TopicList
	if err := c.List(ctx, &topics, client.InNamespace(namespace)); err != nil {
		return Sharing{}, fmt.Errorf("listing the Topics of %s: %w", namespace, err)
	}
	var subs v1alpha1.SubscriptionList
	if err := c.List(ctx, &subs, client.InNamespace(namespace)); err != nil {
		return Sharing{}, fmt.Errorf("listing the Subscriptions of %s: %w", namespace, err)
	}
	type exportKey struct {
		subject string
		service bool
	}
	exported := map[exportKey]bool{}
	export := func(subject string, service bool, namespaces []string) {
		k := exportKey{subject, service}
		if exported[k] {
			return // the same subject twice (conflicting Topics): the first
		}
		exported[k] = true
		s.Exports = append(s.Exports, Export{Subject: subject, Service: service, Namespaces: slices.Sorted(slices.Values(namespaces))})
	}
	for _, t := range topics.Items {
		if t.Spec.Export != nil {
			export(string(t.Spec.Subject), false, t.Spec.Export.Namespaces)
		}
	}
	for _, sub := range subs.Items {
		if sub.Spec.Export != nil {
			export(string(sub.Spec.Subject), true, sub.Spec.Export.Namespaces)
		}
	}
	exporterTopics := map[string][]v1alpha1.Topic{}
	exporterSubs := map[string][]v1alpha1.Subscription{}
	seen := map[Import]bool{}
	add := func(i Import) {
		if !seen[i] {
			seen[i] = true
			s.Imports = append(s.Imports, i)
		}
	}
	for _, sub := range subs.Items {
		if sub.Spec.Import == nil || sub.Spec.Import.Namespace == namespace {
			continue
		}
		from := sub.Spec.Import.Namespace
		if _, ok := exporterTopics[from]; !ok {
			var list v1alpha1.TopicList
			if err := c.List(ctx, &list, client.InNamespace(from)); err != nil {
				return Sharing{}, fmt.Errorf("listing the Topics of %s: %w", from, err)
			}
			exporterTopics[from] = list.Items
		}
		for _, subject := range ExportsTo(namespace, string(sub.Spec.Subject), exporterTopics[from]) {
			add(Import{Namespace: from, Subject: subject})
		}
	}
	for _, t := range topics.Items {
		if t.Spec.Import == nil || t.Spec.Import.Namespace == namespace {
			continue
		}
		from := t.Spec.Import.Namespace
		if _, ok := exporterSubs[from]; !ok {
			var list v1alpha1.SubscriptionList
			if err := c.List(ctx, &list, client.InNamespace(from)); err != nil {
				return Sharing{}, fmt.Errorf("listing the Subscriptions of %s: %w", from, err)
			}
			exporterSubs[from] = list.Items
		}
		for _, subject := range ServicesTo(namespace, string(t.Spec.Subject), exporterSubs[from]) {
			add(Import{Namespace: from, Subject: subject, Service: true})
		}
	}
	slices.SortFunc(s.Exports, func(a, b Export) int {
		return cmp.Or(cmp.Compare(a.Subject, b.Subject), boolOrder(a.Service, b.Service))
	})
	slices.SortFunc(s.Imports, func(a, b Import) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Subject, b.Subject), boolOrder(a.Service, b.Service))
	})
	return s, nil
}

func boolOrder(a, b bool) int {
	switch {
	case a == b:
		return 0
	case b:
		return -1
	}
	return 1
}

// exportType is a stream's or a service's JWT type.
func exportType(service bool) jwt.ExportType {
	if service {
		return jwt.Service
	}
	return jwt.Stream
}

// applySharing adds s to the account claims of namespace: each export requires
// an activation, and each import carries one, signed by the exporter's
// account for the importer's, so that an export reaches exactly the
// namespaces it names (a JWT export has no allow-list of its own).
func (k Keys) applySharing(acc *jwt.AccountClaims, s Sharing) error {
	for _, e := range s.Exports {
		export := &jwt.Export{Name: e.Subject, Subject: jwt.Subject(e.Subject), Type: exportType(e.Service), TokenReq: true}
		if e.Service {
			// One reply per request, as a pod's own responders give.
			export.ResponseType = jwt.ResponseTypeSingleton
		}
		acc.Exports.Add(export)
	}
	for _, i := range s.Imports {
		exporter, err := k.AccountKey(i.Namespace)
		if err != nil {
			return err
		}
		activation := jwt.NewActivationClaims(acc.Subject)
		activation.Name = i.Subject
		activation.ImportSubject = jwt.Subject(i.Subject)
		activation.ImportType = exportType(i.Service)
		token, err := activation.Encode(exporter)
		if err != nil {
			return fmt.Errorf("signing the activation of %s's import of %s from %s: %w", acc.Name, i.Subject, i.Namespace, err)
		}
		acc.Imports.Add(&jwt.Import{Name: i.Namespace + "/" + i.Subject, Account: publicKey(exporter), Subject: jwt.Subject(i.Subject), Type: exportType(i.Service), Token: token})
	}
	return nil
}

// watchPolicies marks the accounts that an export or an import touches
// whenever a Topic or a Subscription changes: the object's own namespace,
// and the namespaces it exported to and exports to now (their imports
// follow). It returns a function that stops watching.
func (k *Keeper) watchPolicies(ctx context.Context) (func(), error) {
	touched := func(obj any) []string {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		var ns string
		var export *v1alpha1.Export
		switch o := obj.(type) {
		case *v1alpha1.Topic:
			ns, export = o.Namespace, o.Spec.Export
		case *v1alpha1.Subscription:
			ns, export = o.Namespace, o.Spec.Export
		default:
			return nil
		}
		out := []string{ns}
		if export != nil {
			out = append(out, export.Namespaces...)
		}
		return out
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.policyChanged(touched(obj)...) },
		UpdateFunc: func(old, obj any) {
			// Exports and imports are spec: the status writes that follow
			// every change (several per object) re-sign nothing.
			if !specChanged(old, obj) {
				return
			}
			k.policyChanged(append(touched(old), touched(obj)...)...)
		},
		DeleteFunc: func(obj any) { k.policyChanged(touched(obj)...) },
	}
	var stops []func()
	stopAll := func() {
		for _, s := range stops {
			s()
		}
	}
	for _, obj := range []client.Object{&v1alpha1.Topic{}, &v1alpha1.Subscription{}} {
		informer, err := k.Pods.GetInformer(ctx, obj)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("watching %T for exports and imports: %w", obj, err)
		}
		reg, err := informer.AddEventHandler(handler)
		if err != nil {
			stopAll()
			return nil, fmt.Errorf("watching %T for exports and imports: %w", obj, err)
		}
		stops = append(stops, func() { _ = informer.RemoveEventHandler(reg) })
	}
	return stopAll, nil
}

// specChanged reports whether an update changed an object's spec (its
// generation), or is of an object it cannot tell.
func specChanged(old, obj any) bool {
	before, ok1 := old.(client.Object)
	after, ok2 := obj.(client.Object)
	return !ok1 || !ok2 || before.GetGeneration() != after.GetGeneration()
}
