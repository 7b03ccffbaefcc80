// Package podrunner plays the kubelet's part for the weighstation sidecar
// of the demo's pods, and for nothing else: envtest's control plane has no
// kubelet, so the Pods the demo creates would never run. For each Pod it
// reads the Pod, requests the token the Pod's projected volume would hold
// (TokenRequest, bound to the Pod), starts the sidecar as a local process
// with the Pod's identity on ports of its own, waits until the sidecar is
// ready (its configuration arrived from the operator), and then patches
// the Pod's status as a kubelet would. The applications are the demo's to
// start.
package podrunner

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/hack/benchharness"
	"github.com/weighstation/weighstation/hack/benchharness/kubeenv"
)

// SidecarContainer is the name of the sidecar's container in a pod's
// manifest (a native sidecar: an init container that always restarts).
const SidecarContainer = "weighstation-sidecar"

// Options are what every sidecar shares.
type Options struct {
	// Cluster is the apiserver, with the admin client a kubelet's
	// credentials stand in for.
	Cluster *kubeenv.Cluster
	// SidecarCommand runs the sidecar: the binary and the arguments before
	// the flags (`weighstation-sidecar`, or `weighstation sidecar`: the same sidecar).
	SidecarCommand []string
	// BrokerURL and BrokerTokenFile: the broker and its token.
	BrokerURL, BrokerTokenFile string
	// XDSAddr is the operator's xDS address, XDSServerName the name its
	// certificate carries, CAFile its CA bundle.
	XDSAddr, XDSServerName, CAFile string
	// ReportInterval is the sidecars' -report-interval.
	ReportInterval time.Duration
	// Dir holds the tokens and the sidecars' logs.
	Dir string
	// ReadyTimeout bounds the wait for a sidecar's readiness.
	ReadyTimeout time.Duration
}

// Pod is one running pod's sidecar.
type Pod struct {
	Name, Namespace string
	// NATSURL is where the pod's applications connect; MetricsURL the
	// sidecar's /metrics.
	NATSURL, MetricsURL string
	Sidecar             *benchharness.LoggedProc
}

// Start runs the sidecar of the Pod namespace/name and marks the Pod
// running. The sidecar's stop is registered with benchharness.AtExit.
func Start(ctx context.Context, o Options, namespace, name string) (*Pod, error) {
	var pod corev1.Pod
	if err := o.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if !hasSidecar(&pod) {
		return nil, fmt.Errorf("pod %s/%s has no %s container: nothing for the runner to run", namespace, name, SidecarContainer)
	}
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("pod %s/%s is not scheduled (spec.nodeName): the operator does not count it", namespace, name)
	}
	audience, lifetime, err := projectedToken(&pod)
	if err != nil {
		return nil, err
	}
	tokenFile, err := o.Cluster.PodToken(ctx, &pod, audience, lifetime, o.Dir)
	if err != nil {
		return nil, err
	}
	listen, err1 := benchharness.FreeAddr()
	metrics, err2 := benchharness.FreeAddr()
	health, err3 := benchharness.FreeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("finding ports for %s: %w", name, err)
	}
	args := append(append([]string(nil), o.SidecarCommand[1:]...),
		"-listen", listen, "-metrics-listen", metrics, "-health-listen", health,
		"-broker", o.BrokerURL, "-token-file", o.BrokerTokenFile,
		"-operator", o.XDSAddr, "-operator-server-name", o.XDSServerName, "-ca-file", o.CAFile,
		"-identity-token-file", tokenFile,
		"-pod-name", pod.Name, "-pod-namespace", pod.Namespace, "-pod-uid", string(pod.UID),
		"-report-interval", o.ReportInterval.String(),
		// The demo's end: what the applications still hold is not the point.
		"-drain-grace", "1s", "-zap-time-encoding", "rfc3339nano")
	proc, err := benchharness.StartLogged("sidecar of "+name, filepath.Join(o.Dir, name+".sidecar.log"), o.SidecarCommand[0], args...)
	if err != nil {
		return nil, err
	}
	benchharness.AtExit(proc.Stop)
	// Ready once the operator's configuration is in force.
	if err := benchharness.WaitHTTPReady("http://"+health+"/readyz", o.ReadyTimeout, proc.Alive); err != nil {
		return nil, fmt.Errorf("the sidecar of %s: %w", name, err)
	}
	if err := markRunning(ctx, o.Cluster, &pod); err != nil {
		return nil, err
	}
	return &Pod{Name: name, Namespace: namespace, NATSURL: "nats://" + listen, MetricsURL: "http://" + metrics + "/metrics", Sidecar: proc}, nil
}

func hasSidecar(pod *corev1.Pod) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == SidecarContainer {
				return true
			}
		}
	}
	return false
}

// projectedToken is the audience and lifetime of the pod's projected
// ServiceAccount token: the one a kubelet would write into its volume.
func projectedToken(pod *corev1.Pod) (string, time.Duration, error) {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, src := range v.Projected.Sources {
			if t := src.ServiceAccountToken; t != nil {
				lifetime := time.Hour
				if t.ExpirationSeconds != nil {
					lifetime = time.Duration(*t.ExpirationSeconds) * time.Second
				}
				return t.Audience, lifetime, nil
			}
		}
	}
	return "", 0, fmt.Errorf("pod %s/%s has no projected serviceAccountToken volume for the sidecar's identity", pod.Namespace, pod.Name)
}
