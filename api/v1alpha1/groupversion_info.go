// Package v1alpha1 is the weighstation.io/v1alpha1 API: Topic and
// Subscription, the messaging policy of the pods in one namespace.
//
// Scope: NATS subjects are global, but policy is not. A Topic or
// Subscription applies only to the pods of its own namespace; no resource in
// namespace B can change the limits, quotas or permissions of pods in
// namespace A.
//
// +kubebuilder:object:generate=true
// +groupName=weighstation.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API's group and version.
	GroupVersion = schema.GroupVersion{Group: "weighstation.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API's types with a scheme.
	SchemeBuilder = (&scheme.Builder{GroupVersion: GroupVersion}).Register(&Topic{}, &TopicList{}, &Subscription{}, &SubscriptionList{})

	// AddToScheme adds the API's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
