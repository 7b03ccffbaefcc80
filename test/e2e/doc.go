// Package e2e holds weighstation's end-to-end stories: the chart installed
// on a real cluster (kubelet, containerd, kube-proxy, CoreDNS), the probe
// and demo applications injected with the sidecar, Topics and
// Subscriptions applied, and faults (the leader deleted and killed, a
// broker deleted, a pod's credential revoked, an upgrade, a Subscription
// deleted) measured against their targets. README.md says how to run them.
//
// The stories are behind the build tag e2e (`go test -c -tags e2e`), so
// that `go test ./...` never needs a cluster; the package's plain files are
// the pure helpers they use (configuration, polling, metrics and status
// parsing, manifests, the summary), unit-tested without a cluster.
package e2e
