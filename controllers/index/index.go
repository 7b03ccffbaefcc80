// Package index holds the field indexes of the manager's cache that the
// reconcilers list by, and their names.
package index

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

const (
	// TopicSubject indexes Topics by subject pattern: which Topic is in
	// force for a pattern depends only on the Topics with that pattern.
	TopicSubject = "spec.subject"
	// ImportNamespace indexes Subscriptions and Topics by the namespace
	// they import from, so that an exporter's change requeues its
	// importers.
	ImportNamespace = "spec.import.namespace"
)

// Register registers every index with the manager's cache.
func Register(ctx context.Context, indexer client.FieldIndexer) error {
	if err := indexer.IndexField(ctx, &v1alpha1.Topic{}, TopicSubject, func(obj client.Object) []string {
		return []string{string(SubjectOf(obj))}
	}); err != nil {
		return fmt.Errorf("indexing topics by subject: %w", err)
	}
	if err := indexer.IndexField(ctx, &v1alpha1.Subscription{}, ImportNamespace, importNamespace); err != nil {
		return fmt.Errorf("indexing subscriptions and topics by import: %w", err)
	}
	if err := indexer.IndexField(ctx, &v1alpha1.Topic{}, ImportNamespace, importNamespace); err != nil {
		return fmt.Errorf("indexing subscriptions and topics by import: %w", err)
	}
	return nil
}

// TopicsWithSubject lists, without copying, the Topics of namespace with
// the given subject pattern.
func TopicsWithSubject(ctx context.Context, c client.Reader, namespace string, subject v1alpha1.SubjectPattern) ([]v1alpha1.Topic, error) {
	var topics v1alpha1.TopicList
	if err := c.List(ctx, &topics, client.InNamespace(namespace), client.MatchingFields{TopicSubject: string(subject)}, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the topics of %s on %q: %w", namespace, subject, err)
	}
	return topics.Items, nil
}

// SubjectOf is a Topic's or a Subscription's subject ("" for other kinds).
func SubjectOf(obj client.Object) v1alpha1.SubjectPattern {
	switch o := obj.(type) {
	case *v1alpha1.Topic:
		return o.Spec.Subject
	case *v1alpha1.Subscription:
		return o.Spec.Subject
	}
	return ""
}

// importNamespace indexes a Subscription or a Topic by the namespace it
// imports from.
func importNamespace(obj client.Object) []string {
	var imp *v1alpha1.NamespaceRef
	switch o := obj.(type) {
	case *v1alpha1.Subscription:
		imp = o.Spec.Import
	case *v1alpha1.Topic:
		imp = o.Spec.Import
	}
	if imp == nil {
		return nil
	}
	return []string{imp.Namespace}
}
