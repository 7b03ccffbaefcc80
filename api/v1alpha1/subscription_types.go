package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SubscriptionSpec says who consumes what, and how much it matters.
//
// +kubebuilder:validation:XValidation:rule="!(self.essential && has(self.killSwitch) && has(self.killSwitch.auto))",message="killSwitch.auto is only allowed with essential: false: essential subscriptions never trip automatically"
// +kubebuilder:validation:XValidation:rule="!has(self.killSwitch) || !has(self.killSwitch.auto) || !has(self.killSwitch.auto.maxPendingMessages) || self.killSwitch.auto.maxPendingMessages <= self.limits.maxPendingMessages",message="killSwitch.auto.maxPendingMessages must not exceed limits.maxPendingMessages"
type SubscriptionSpec struct {
	// Subject is the subject pattern the selected pods consume, for example
	// "orders.*". A pod may subscribe only to patterns this covers.
	Subject SubjectPattern `json:"subject"`

	// QueueGroup makes the selected pods share the messages: each message
	// goes to one member of the group. Unset, every pod gets every message.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	// +kubebuilder:validation:XValidation:rule=`self.matches(r'^[^\s*>]+$')`,message="invalid queueGroup: it must not contain whitespace, '*' or '>'"
	QueueGroup string `json:"queueGroup,omitempty"`

	// Selector selects the consuming pods in this namespace.
	Selector metav1.LabelSelector `json:"selector"`

	// Essential subscriptions are never killed automatically and are shed
	// last when a sidecar runs out of its memory budget. Default true.
	// (A pointer, so that a client that leaves it unset gets the default
	// rather than sending false.)
	// +optional
	// +kubebuilder:default=true
	Essential *bool `json:"essential,omitempty"`

	// KillSwitch stops delivery to this subscription, by hand or, for
	// non-essential subscriptions, automatically under overload.
	// +optional
	KillSwitch *KillSwitch `json:"killSwitch,omitempty"`

	// Limits bound what waits in each sidecar for each consuming pod.
	// +optional
	// +kubebuilder:default={}
	Limits SubscriptionLimits `json:"limits,omitempty"`

	// Import consumes subjects of another namespace: those of its Topics
	// that export to this namespace and overlap subject. They appear
	// under their own subjects here, beside this namespace's own. Without
	// an export that matches, the Subscription is Valid=False and imports
	// nothing.
	// +optional
	Import *NamespaceRef `json:"import,omitempty"`

	// Export lets the named namespaces send requests to this
	// Subscription's subject (a NATS service export): their Topics that
	// import from this namespace route what their pods publish there to
	// this Subscription's pods, and the replies back.
	// +optional
	Export *Export `json:"export,omitempty"`
}

// IsEssential reports whether the subscription is essential (the default).
func (s *SubscriptionSpec) IsEssential() bool { return s.Essential == nil || *s.Essential }

// KillSwitch stops delivery to a subscription: the sidecar withdraws its
// upstream interest (queue-group membership included), so the rest of a
// group takes the load and requests addressed only to it fail fast.
type KillSwitch struct {
	// Engaged stops delivery now. Set it back to false to restore it.
	// +optional
	Engaged bool `json:"engaged,omitempty"`

	// Reason is a note for humans on why the switch is engaged.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason,omitempty"`

	// Auto trips the switch by itself when the consumer is overloaded, and
	// tries it again after a cooldown (a circuit breaker). Only for
	// subscriptions with essential: false.
	// +optional
	Auto *AutoKillSwitch `json:"auto,omitempty"`
}

// AutoKillSwitch is when a kill switch trips by itself.
//
// +kubebuilder:validation:XValidation:rule="has(self.maxPendingMessages) || has(self.maxLatency)",message="killSwitch.auto needs maxPendingMessages, maxLatency or both to trip on"
type AutoKillSwitch struct {
	// MaxPendingMessages trips the switch when more messages than this wait
	// in the sidecar for one consuming pod, that is, when the application
	// stopped reading. At most limits.maxPendingMessages.
	// +optional
	// +kubebuilder:validation:Minimum=1
	MaxPendingMessages *int32 `json:"maxPendingMessages,omitempty"`

	// MaxLatency trips the switch when the consumer's reply latency p99 over
	// window exceeds it (for subscriptions that answer requests).
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="killSwitch.auto.maxLatency must be positive"
	MaxLatency *metav1.Duration `json:"maxLatency,omitempty"`

	// Window is the period over which pending messages and latency are
	// judged. Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="killSwitch.auto.window must be between 1s and 1h"
	Window *metav1.Duration `json:"window,omitempty"`

	// Cooldown is how long a tripped switch stays open before it lets
	// messages through again on trial. Default 30s.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('24h')",message="killSwitch.auto.cooldown must be between 1s and 24h"
	Cooldown *metav1.Duration `json:"cooldown,omitempty"`
}

// OverflowPolicy is what a full pending queue does with the next message.
// +kubebuilder:validation:Enum=DropNewest;DropOldest
type OverflowPolicy string

const (
	// DropNewest refuses the arriving message.
	DropNewest OverflowPolicy = "DropNewest"
	// DropOldest evicts the message that waited longest.
	DropOldest OverflowPolicy = "DropOldest"
)

// SubscriptionLimits bound each consuming pod's pending queue in its sidecar.
// Every drop is counted by reason.
type SubscriptionLimits struct {
	// MaxPendingMessages is the most messages that may wait for one
	// consuming pod. Default 1000.
	// +optional
	// +kubebuilder:default=1000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxPendingMessages int32 `json:"maxPendingMessages,omitempty"`

	// MaxPendingBytes is the most bytes that may wait for one consuming pod.
	// Default 8 MiB, at most 1 GiB.
	// +optional
	// +kubebuilder:default=8388608
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1073741824
	MaxPendingBytes int64 `json:"maxPendingBytes,omitempty"`

	// Overflow is what a full queue does with the next message: DropNewest
	// (default) or DropOldest.
	// +optional
	// +kubebuilder:default=DropNewest
	Overflow OverflowPolicy `json:"overflow,omitempty"`
}

// LatencySummary is a latency distribution's percentiles over the
// reporting window, from an HdrHistogram merged from the sidecars' own
// (never an average of percentiles, never a mean). The operator keeps the
// distributions at 2 significant digits: a value here is within 1% (one
// bucket, at most 1/128 of the value) of the sidecars' 3-digit histograms.
type LatencySummary struct {
	// P50 is the median.
	P50 metav1.Duration `json:"p50"`
	// P90 is the 90th percentile.
	P90 metav1.Duration `json:"p90"`
	// P99 is the 99th percentile.
	P99 metav1.Duration `json:"p99"`
	// P999 is the 99.9th percentile.
	P999 metav1.Duration `json:"p999"`
	// P9999 is the 99.99th percentile.
	P9999 metav1.Duration `json:"p9999"`
	// Max is the largest value measured.
	Max metav1.Duration `json:"max"`
	// Count is the number of values measured.
	Count int64 `json:"count"`
}

// ReasonCount is a number of messages with the reason they count for.
type ReasonCount struct {
	// Reason is the sidecar's reason, as its metrics name it (for drops:
	// overflow, budget, shed, connection, shutdown, closed, unsubscribed,
	// killed, unsupported; for refusals: access, size, rate).
	Reason string `json:"reason"`
	// Count is the number of messages in the window.
	Count int64 `json:"count"`
}

// AggregateStatus is what the sidecars of every selected pod measured over
// the window.
type AggregateStatus struct {
	// LatencySummary is the end-to-end latency: from the publishing
	// sidecar's timestamp to this pod's sidecar writing the message to
	// the application's socket. It spans two clocks (two nodes' clocks
	// when publisher and consumer run on different nodes) and covers
	// stamped messages only. Time the message then spends in the
	// application's own client buffers is not seen.
	LatencySummary `json:",inline"`
	// Dwell is the time from a message's arrival in the consuming sidecar
	// to its write to the application's socket (one clock): the queueing
	// that the sidecar's limits govern.
	// +optional
	Dwell *LatencySummary `json:"dwell,omitempty"`
	// Delivered is the number of messages written to the applications in
	// the window.
	Delivered int64 `json:"delivered"`
	// Dropped counts, by reason, the messages dropped in the window.
	// +optional
	// +listType=map
	// +listMapKey=reason
	Dropped []ReasonCount `json:"dropped,omitempty"`
	// Pods is the number of pods whose reports are in the window.
	Pods int32 `json:"pods"`
	// LatencyShedReports is the number of reports in the window whose
	// latency the operator shed at its report memory cap
	// (-report-max-bytes): their counters and kill states are in, their
	// latency is not, so the percentiles cover the other reports only.
	// +optional
	LatencyShedReports int32 `json:"latencyShedReports,omitempty"`
	// StalePods is the number of those that stopped reporting.
	// +optional
	StalePods int32 `json:"stalePods,omitempty"`
	// WindowStart is when the window began: the window's length ago, or,
	// when later, when this operator replica started receiving reports
	// (a new leader starts fresh windows).
	WindowStart metav1.Time `json:"windowStart"`
	// Window is the window's length (the operator's -report-window).
	Window metav1.Duration `json:"window"`
}

// KillReason says why a pod's subscription is killed.
// +kubebuilder:validation:Enum=Manual;Auto;Shed
type KillReason string

const (
	// KillManual: the kill switch is engaged.
	KillManual KillReason = "Manual"
	// KillAuto: the automatic kill switch tripped.
	KillAuto KillReason = "Auto"
	// KillShed: the sidecar shed it to stay within its memory budget.
	KillShed KillReason = "Shed"
)

// PodKill is a pod's kill state for a subscription.
type PodKill struct {
	// Reason is Manual (the switch is engaged), Auto (it tripped) or Shed
	// (the sidecar's memory budget ran out).
	Reason KillReason `json:"reason"`
	// Since is when the subscription was killed in this pod.
	Since metav1.Time `json:"since"`
}

// SubscriptionPodStatus is one consuming pod's report over the window.
type SubscriptionPodStatus struct {
	// Name is the pod's name.
	Name string `json:"name"`
	// Delivered is the number of messages written to the application in
	// the window.
	Delivered int64 `json:"delivered"`
	// Dropped counts, by reason, the messages dropped in the window.
	// +optional
	// +listType=map
	// +listMapKey=reason
	Dropped []ReasonCount `json:"dropped,omitempty"`
	// Killed is set while delivery to this pod is stopped, with why.
	// +optional
	Killed *PodKill `json:"killed,omitempty"`
	// Latency is the end-to-end latency in this pod (see
	// AggregateStatus).
	// +optional
	Latency *LatencySummary `json:"latency,omitempty"`
	// Dwell is the time messages spent in this pod's sidecar.
	// +optional
	Dwell *LatencySummary `json:"dwell,omitempty"`
	// LastReportTime is when the sidecar last reported.
	// +optional
	LastReportTime *metav1.Time `json:"lastReportTime,omitempty"`
	// Stale is set once the sidecar missed two reports; the pod is dropped
	// from the status when its last report leaves the window.
	// +optional
	Stale bool `json:"stale,omitempty"`
}

// ConfigStatus is how far the resource's policy has reached the sidecars,
// from their acknowledgements (ACK) and refusals (NACK) over xDS.
type ConfigStatus struct {
	// Version is the version of the policy the operator serves: a hash of
	// the policy alone, as sidecars acknowledge it.
	// +optional
	Version string `json:"version,omitempty"`
	// AppliedPods is the number of counted pods whose sidecar acknowledged
	// Version. Counted pods are those the resource selects that carry the
	// sidecar, are scheduled (spec.nodeName set), are not terminating and
	// have not Succeeded or Failed.
	// +optional
	AppliedPods int32 `json:"appliedPods,omitempty"`
	// TotalPods is the number of counted pods.
	// +optional
	TotalPods int32 `json:"totalPods,omitempty"`
	// Rejected lists pods whose sidecar refused Version, with why (at most
	// 10; the ConfigRejected condition gives the count).
	// +optional
	// +kubebuilder:validation:MaxItems=10
	// +listType=map
	// +listMapKey=pod
	Rejected []ConfigRejection `json:"rejected,omitempty"`
	// ObservedTime is when the operator served Version.
	// +optional
	ObservedTime *metav1.Time `json:"observedTime,omitempty"`
	// PropagationTime is how long Version took, from ObservedTime, to be
	// applied by every counted pod; unset while it has not.
	// +optional
	PropagationTime *metav1.Duration `json:"propagationTime,omitempty"`
}

// ConfigRejection is one pod's refusal of a configuration.
type ConfigRejection struct {
	// Pod is the pod's name.
	Pod string `json:"pod"`
	// Reason is the sidecar's reason, as it sent it.
	Reason string `json:"reason"`
}

// MaxReportedPods bounds status.pods, so that a Subscription's status stays
// small however many pods it selects; the aggregate covers them all.
const MaxReportedPods = 100

// SubscriptionStatus is the observed state of a Subscription.
type SubscriptionStatus struct {
	// ObservedGeneration is the generation this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Valid (the spec), Ready (every counted pod applied the
	// current version), ConfigRejected, KillSwitchEngaged (by hand, from
	// the spec), Degraded (observed trouble: stale pods, refused
	// configuration, tripped breakers, drops that mean loss).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// Pods holds the pods with the worst end-to-end p99 over the window,
	// at most the operator's -report-pods (default 10, at most 100:
	// MaxReportedPods), stale pods first.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	// +listType=map
	// +listMapKey=name
	Pods []SubscriptionPodStatus `json:"pods,omitempty"`

	// Aggregate is what the sidecars of all selected pods measured over
	// the window.
	// +optional
	Aggregate *AggregateStatus `json:"aggregate,omitempty"`

	// Dropped is the number of messages dropped in the window, over all
	// pods and reasons (aggregate.dropped has them by reason).
	// +optional
	Dropped int64 `json:"dropped,omitempty"`

	// Killed is the kill switch's effective state as the sidecars report
	// it: "Manual" (engaged by hand), "Auto 2/5 pods" (the breaker
	// tripped in 2 of the 5 reporting pods), or empty.
	// +optional
	Killed string `json:"killed,omitempty"`

	// Config is how far the configuration has reached the sidecars.
	// +optional
	Config *ConfigStatus `json:"config,omitempty"`
}

// Subscription declares which pods of its namespace consume a subject
// pattern, with their limits and kill switch.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wsub,categories=weighstation
// +kubebuilder:printcolumn:name="SUBJECT",type=string,JSONPath=`.spec.subject`
// +kubebuilder:printcolumn:name="ESSENTIAL",type=boolean,JSONPath=`.spec.essential`
// +kubebuilder:printcolumn:name="KILLED",type=string,JSONPath=`.status.killed`
// +kubebuilder:printcolumn:name="PODS",type=integer,JSONPath=`.status.config.totalPods`
// +kubebuilder:printcolumn:name="P99",type=string,JSONPath=`.status.aggregate.p99`
// +kubebuilder:printcolumn:name="P99.9",type=string,JSONPath=`.status.aggregate.p999`
// +kubebuilder:printcolumn:name="MAX",type=string,JSONPath=`.status.aggregate.max`
// +kubebuilder:printcolumn:name="DROPPED",type=integer,JSONPath=`.status.dropped`
// +kubebuilder:printcolumn:name="IMPORT-FROM",type=string,JSONPath=`.spec.import.namespace`,priority=1,description="the namespace whose exported Topics it consumes"
// +kubebuilder:printcolumn:name="EXPORTED-TO",type=string,JSONPath=`.spec.export.namespaces`,priority=1,description="namespaces that may send it requests"
// +kubebuilder:printcolumn:name="READY",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="AGE",type=date,JSONPath=`.metadata.creationTimestamp`
type Subscription struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired consumption.
	Spec SubscriptionSpec `json:"spec"`
	// Status is the observed state.
	// +optional
	Status SubscriptionStatus `json:"status,omitempty"`
}

// SubscriptionList is a list of Subscriptions.
//
// +kubebuilder:object:root=true
type SubscriptionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Subscriptions.
	Items []Subscription `json:"items"`
}
