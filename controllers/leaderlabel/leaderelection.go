package leaderlabel

// The operator's leader election (controller-runtime's, on a
// coordination.k8s.io Lease) runs in the operator's own namespace
// (-leader-election-namespace, by default -namespace). As for the CA
// Secret, the namespace below is a placeholder: controller-gen makes these
// rules a Role in weighstation-system, and the chart puts that Role (and its
// RoleBinding) in the release namespace. Without this rule a replica never
// becomes the leader, so nothing reconciles.
//
// Leader election records each change of leader as a core Event in the
// Lease's namespace (client-go's resource lock has no events.k8s.io
// recorder yet); the reconcilers' Events go through events.k8s.io. Both
// are granted with the propagation's rules (controllers/propagation); the
// core rule is repeated here so that it stays if those change.
//
// +kubebuilder:rbac:groups=coordination.k8s.io,namespace=weighstation-system,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
