package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TopicSpec is the policy for the subjects that this namespace's pods
// publish to.
type TopicSpec struct {
	// Subject is the subject pattern this Topic governs, for example
	// "orders.>". When several Topics of a namespace match a subject, the
	// most specific governs: patterns are compared token by token, a literal
	// beats '*', '*' beats '>', and a longer pattern beats a shorter one.
	// Two Topics with the same pattern are both marked Conflicting.
	Subject SubjectPattern `json:"subject"`

	// Limits bound what a pod may publish to the governed subjects.
	// +optional
	// +kubebuilder:default={}
	Limits TopicLimits `json:"limits,omitempty"`

	// Publishers selects the pods of this namespace that may publish to the
	// governed subjects. When unset, every pod of the namespace may.
	// +optional
	Publishers *metav1.LabelSelector `json:"publishers,omitempty"`

	// Latency controls the sidecar's end-to-end latency measurement.
	// +optional
	// +kubebuilder:default={}
	Latency TopicLatency `json:"latency,omitempty"`

	// Export shares the governed subjects with other namespaces: what
	// this namespace's pods publish to them reaches the pods of the named
	// namespaces whose Subscriptions import from this one (a NATS stream
	// export, with an activation per importing namespace). Without it the
	// subjects stay in this namespace.
	// +optional
	Export *Export `json:"export,omitempty"`

	// Import sends what this namespace's pods publish to the governed
	// subjects, as requests, to another namespace's responders: those of
	// its Subscriptions that export to this namespace and overlap subject
	// (a NATS service import; the replies come back to the requester).
	// Without an export that matches, the Topic is Valid=False and
	// imports nothing.
	// +optional
	Import *NamespaceRef `json:"import,omitempty"`
}

// NamespaceRef names another namespace.
type NamespaceRef struct {
	// Namespace is the other namespace, by name (the reconciler marks a
	// reference to the object's own namespace Valid=False; CEL cannot
	// read an object's namespace).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`
}

// Export names the namespaces that may import a Topic's subjects (a
// stream) or send requests to a Subscription's (a service).
type Export struct {
	// Namespaces are the namespaces that may import, by name.
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces"`
}

// TopicLimits are the explicit limits on publishing to a Topic.
//
// +kubebuilder:validation:XValidation:rule="!has(self.publishRate) || !has(self.publishRate.bytesBurst) || self.publishRate.bytesBurst >= self.maxMessageBytes",message="limits.publishRate.bytesBurst must be at least limits.maxMessageBytes: a smaller byte burst would refuse the largest allowed messages forever"
type TopicLimits struct {
	// MaxMessageBytes is the largest message (headers and payload) a pod may
	// publish to the governed subjects, in bytes. Default 1 MiB, at most
	// 8 MiB.
	// +optional
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=8388608
	MaxMessageBytes int64 `json:"maxMessageBytes,omitempty"`

	// PublishRate is the publish quota of each publishing pod: token
	// buckets for messages and for bytes, each with its own burst. A publish
	// over quota is refused with an error the client sees, never queued.
	// +optional
	PublishRate *PublishRate `json:"publishRate,omitempty"`
}

// PublishRate is a per-pod publish quota. Give messagesPerSecond with
// messagesBurst, bytesPerSecond with bytesBurst, or both pairs.
//
// +kubebuilder:validation:XValidation:rule="has(self.messagesPerSecond) == has(self.messagesBurst)",message="publishRate.messagesPerSecond and publishRate.messagesBurst must be set together"
// +kubebuilder:validation:XValidation:rule="has(self.bytesPerSecond) == has(self.bytesBurst)",message="publishRate.bytesPerSecond and publishRate.bytesBurst must be set together"
// +kubebuilder:validation:XValidation:rule="has(self.messagesPerSecond) || has(self.bytesPerSecond)",message="publishRate must limit messages, bytes or both"
type PublishRate struct {
	// MessagesPerSecond is the sustained rate of messages a pod may publish.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MessagesPerSecond *int64 `json:"messagesPerSecond,omitempty"`

	// MessagesBurst is how many messages a pod may publish at once above
	// the sustained rate.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000000
	MessagesBurst *int64 `json:"messagesBurst,omitempty"`

	// BytesPerSecond is the sustained rate of bytes (headers and payload) a
	// pod may publish.
	// +optional
	// +kubebuilder:validation:Minimum=1
	BytesPerSecond *int64 `json:"bytesPerSecond,omitempty"`

	// BytesBurst is how many bytes a pod may publish at once above the
	// sustained rate. It must be at least limits.maxMessageBytes.
	// +optional
	// +kubebuilder:validation:Minimum=1
	BytesBurst *int64 `json:"bytesBurst,omitempty"`
}

// TopicLatency controls end-to-end latency measurement on a Topic.
type TopicLatency struct {
	// StampHeader allows the publishing sidecar to add its timestamp header
	// to this Topic's messages (never on '$'-prefixed subjects); the
	// consuming sidecar removes it. Default true.
	// +optional
	// +kubebuilder:default=true
	StampHeader *bool `json:"stampHeader,omitempty"`
}

// TopicStatus is the observed state of a Topic.
type TopicStatus struct {
	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Valid (the policy is in force), Conflicting (another
	// Topic of the namespace has the same pattern), Ready (the sidecars
	// applied the current version), ConfigRejected.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Subscriptions is the number of Subscriptions of the namespace whose
	// subject this Topic governs.
	// +optional
	Subscriptions int32 `json:"subscriptions,omitempty"`

	// Config is how far the Topic's policy has reached the sidecars. Pod
	// counts are kept only for a Topic with a publishers selector: one that
	// applies to every pod of its namespace reports its version and
	// refusals, and its pods only as a metric, so that a pod's creation
	// does not rewrite every such Topic.
	// +optional
	Config *ConfigStatus `json:"config,omitempty"`

	// Publish is what the publishing pods' sidecars counted under this
	// Topic over the window.
	// +optional
	Publish *PublishStatus `json:"publish,omitempty"`
}

// PublishStatus counts the publishes under a Topic over the reporting
// window, from the sidecars' reports.
type PublishStatus struct {
	// Attempts is the number of messages the applications published.
	Attempts int64 `json:"attempts"`
	// Forwarded is the number the sidecars passed to the broker.
	Forwarded int64 `json:"forwarded"`
	// Refused counts, by reason (access, size, rate), the publishes the
	// sidecars refused.
	// +optional
	// +listType=map
	// +listMapKey=reason
	Refused []ReasonCount `json:"refused,omitempty"`
	// Pods is the number of pods whose reports are in the window.
	Pods int32 `json:"pods"`
	// WindowStart is when the window began (see AggregateStatus).
	WindowStart metav1.Time `json:"windowStart"`
	// Window is the window's length.
	Window metav1.Duration `json:"window"`
}

// Topic is the publishing policy for a subject pattern, for the pods of its
// namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wtopic,categories=weighstation
// +kubebuilder:printcolumn:name="SUBJECT",type=string,JSONPath=`.spec.subject`
// +kubebuilder:printcolumn:name="MAX-BYTES",type=integer,JSONPath=`.spec.limits.maxMessageBytes`
// +kubebuilder:printcolumn:name="RATE",type=integer,JSONPath=`.spec.limits.publishRate.messagesPerSecond`,description="messages per second per pod"
// +kubebuilder:printcolumn:name="PUBLISHED",type=integer,JSONPath=`.status.publish.forwarded`,description="messages forwarded in the window"
// +kubebuilder:printcolumn:name="EXPORTED-TO",type=string,JSONPath=`.spec.export.namespaces`,priority=1,description="namespaces that may import the subjects"
// +kubebuilder:printcolumn:name="IMPORT-FROM",type=string,JSONPath=`.spec.import.namespace`,priority=1,description="the namespace whose exported Subscriptions answer the requests published here"
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type Topic struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired policy.
	Spec TopicSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status TopicStatus `json:"status,omitempty"`
}

// TopicList is a list of Topics.
//
// +kubebuilder:object:root=true
type TopicList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Topics.
	Items []Topic `json:"items"`
}
