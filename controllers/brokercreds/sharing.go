package brokercreds

import (
	"context"
	"fmt"
	"slices"

	"github.com/nats-io/jwt/v2"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/matcher"
)

// Sharing is what one namespace's account shares with others: the
// subjects it exports (Topics with spec.export) and those it imports
// (Subscriptions with spec.import, each matched with the exporter's
// Topics that export to it).
type Sharing struct {
	// Exports are the stream exports, each to the namespaces named.
	Exports []Export
	// Imports are the stream imports.
	Imports []Import
}

// Export is one exported subject and who may import it.
type Export struct {
	Subject    string
	Namespaces []string
}

// Import is one subject imported from a namespace.
type Import struct {
	Namespace, Subject string
}

// ExportsTo returns the subjects of exporter's Topics (topics) that
// export to namespace and overlap subject: what a Subscription of
// namespace with that subject imports from exporter. None: the import is
// not exported (the Subscription is Valid=False).
func ExportsTo(namespace, subject string, topics []v1alpha1.Topic) []string {
	var out []string
	for _, t := range topics {
		if t.Spec.Export == nil || !slices.Contains(t.Spec.Export.Namespaces, namespace) {
			continue
		}
		if matcher.Overlaps(string(t.Spec.Subject), subject) && !slices.Contains(out, string(t.Spec.Subject)) {
			out = append(out, string(t.Spec.Subject))
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
	for _, t := range topics.Items {
		if t.Spec.Export != nil {
			s.Exports = append(s.Exports, Export{Subject: string(t.Spec.Subject), Namespaces: slices.Sorted(slices.Values(t.Spec.Export.Namespaces))})
		}
	}
	var subs v1alpha1.SubscriptionList
	if err := c.List(ctx, &subs, client.InNamespace(namespace)); err != nil {
		return Sharing{}, fmt.Errorf("listing the Subscriptions of %s: %w", namespace, err)
	}
	exporters := map[string][]v1alpha1.Topic{}
	seen := map[Import]bool{}
	for _, sub := range subs.Items {
		if sub.Spec.Import == nil {
			continue
		}
		from := sub.Spec.Import.Namespace
		if _, ok := exporters[from]; !ok {
			var list v1alpha1.TopicList
			if err := c.List(ctx, &list, client.InNamespace(from)); err != nil {
				return Sharing{}, fmt.Errorf("listing the Topics of %s: %w", from, err)
			}
			exporters[from] = list.Items
		}
		for _, subject := range ExportsTo(namespace, string(sub.Spec.Subject), exporters[from]) {
			if i := (Import{Namespace: from, Subject: subject}); !seen[i] {
				seen[i] = true
				s.Imports = append(s.Imports, i)
			}
		}
	}
	slices.SortFunc(s.Exports, func(a, b Export) int { return compareStrings(a.Subject, b.Subject) })
	slices.SortFunc(s.Imports, func(a, b Import) int {
		if c := compareStrings(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return compareStrings(a.Subject, b.Subject)
	})
	return s, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// apply adds s to the account claims of namespace: each export requires
// an activation, and each import carries one, signed by the exporter's
// account for the importer's, so that an export reaches exactly the
// namespaces it names (a JWT export has no allow-list of its own).
func (k Keys) applySharing(acc *jwt.AccountClaims, s Sharing) error {
	for _, e := range s.Exports {
		acc.Exports.Add(&jwt.Export{Name: e.Subject, Subject: jwt.Subject(e.Subject), Type: jwt.Stream, TokenReq: true})
	}
	for _, i := range s.Imports {
		exporter, err := k.AccountKey(i.Namespace)
		if err != nil {
			return err
		}
		activation := jwt.NewActivationClaims(acc.Subject)
		activation.Name = i.Subject
		activation.ImportSubject = jwt.Subject(i.Subject)
		activation.ImportType = jwt.Stream
		token, err := activation.Encode(exporter)
		if err != nil {
			return fmt.Errorf("signing the activation of %s's import of %s from %s: %w", acc.Name, i.Subject, i.Namespace, err)
		}
		acc.Imports.Add(&jwt.Import{Name: i.Namespace + "/" + i.Subject, Account: publicKey(exporter), Subject: jwt.Subject(i.Subject), Type: jwt.Stream, Token: token})
	}
	return nil
}

// watchPolicies marks the accounts that a Topic's export or a
// Subscription's import touches whenever one changes: the object's own
// namespace, and for a Topic the namespaces it exported to and exports to
// now (their imports follow). It returns a function that stops watching.
func (k *Keeper) watchPolicies(ctx context.Context) (func(), error) {
	touched := func(obj any) []string {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		switch o := obj.(type) {
		case *v1alpha1.Topic:
			out := []string{o.Namespace}
			if o.Spec.Export != nil {
				out = append(out, o.Spec.Export.Namespaces...)
			}
			return out
		case *v1alpha1.Subscription:
			return []string{o.Namespace}
		}
		return nil
	}
	handler := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.policyChanged(touched(obj)...) },
		UpdateFunc: func(old, obj any) { k.policyChanged(append(touched(old), touched(obj)...)...) },
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
