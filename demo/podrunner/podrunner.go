// Package podrunner plays the kubelet's part for the weighstation sidecar
// of the demo's pods, and for nothing else: envtest's control plane has no
// kubelet, so the Pods the demo creates would never run. For each Pod it
// reads the sidecar container that the operator's webhook injected, and
// runs that container's spec as a local process:
//
//   - its volumes: the projected ServiceAccount token (a TokenRequest bound
//     to the Pod, with the volume's audience and lifetime) and the CA
//     bundle ConfigMap, written into a directory of the Pod's, and the
//     flags that name files under their mount paths pointed there;
//   - its environment: the downward API's pod name, namespace and UID;
//   - its network: the Service addresses in its flags resolved to the
//     local processes behind them, as cluster DNS and kube-proxy would,
//     with the Service's name kept as the name its certificate must carry;
//     and ports of its own, since every pod here shares one loopback.
//
// It waits until the sidecar is ready (its configuration arrived from the
// operator) and then patches the Pod's status as a kubelet would. The
// applications are the demo's to start.
package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// SidecarContainer is the name of the container the webhook injects (a
// native sidecar: an init container that always restarts).
const SidecarContainer = "weighstation-sidecar"

// Options are what every sidecar shares.
type Options struct {
	// Cluster is the apiserver, with the admin client a kubelet's
	// credentials stand in for.
	Cluster *kubeenv.Cluster
	// SidecarCommand is the local binary the injected container's command
	// names (the image's /weighstation-sidecar), with any arguments
	// before the flags.
	SidecarCommand []string
	// Services resolves the Service addresses (host:port) in the injected
	// flags to the local addresses that serve them.
	Services map[string]string
	// Extra are flags the demo adds after the injected ones.
	Extra []string
	// Dir holds the pods' volumes and the sidecars' logs.
	Dir string
	// ReadyTimeout bounds the waits for a volume's source and for the
	// sidecar's readiness.
	ReadyTimeout time.Duration
}

// Pod is one running pod's sidecar.
type Pod struct {
	Name, Namespace string
	// NATSURL is where the pod's applications connect; MetricsURL the
	// sidecar's /metrics.
	NATSURL, MetricsURL string
	// Command is what the runner ran: the injected flags, rewritten.
	Command []string
	Sidecar *benchharness.LoggedProc
}

// Start runs the injected sidecar of the Pod namespace/name and marks the
// Pod running. The sidecar's stop is registered with benchharness.AtExit.
func Start(ctx context.Context, o Options, namespace, name string) (*Pod, error) {
	var pod corev1.Pod
	if err := o.Cluster.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &pod); err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if _, ok := pod.Annotations[v1alpha1.InjectedAnnotation]; !ok {
		return nil, fmt.Errorf("pod %s/%s was not injected (no %s annotation): the webhook did not see it", namespace, name, v1alpha1.InjectedAnnotation)
	}
	i := slices.IndexFunc(pod.Spec.InitContainers, func(c corev1.Container) bool { return c.Name == SidecarContainer })
	if i < 0 {
		return nil, fmt.Errorf("pod %s/%s has no %s init container: nothing for the runner to run", namespace, name, SidecarContainer)
	}
	if pod.Spec.NodeName == "" {
		return nil, fmt.Errorf("pod %s/%s is not scheduled (spec.nodeName): the operator does not count it", namespace, name)
	}
	ctr := pod.Spec.InitContainers[i]
	dir := filepath.Join(o.Dir, "pods", namespace, name)
	mounts, err := mountVolumes(ctx, o, &pod, ctr, dir)
	if err != nil {
		return nil, err
	}
	env, err := environment(&pod, ctr)
	if err != nil {
		return nil, err
	}
	flags, ports, err := rewrite(ctr.Args, o.Services, mounts)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	args := append(append(append([]string(nil), o.SidecarCommand[1:]...), flags...), o.Extra...)
	proc, err := benchharness.StartLoggedEnv("sidecar of "+name, filepath.Join(o.Dir, name+".sidecar.log"), env, o.SidecarCommand[0], args...)
	if err != nil {
		return nil, err
	}
	benchharness.AtExit(proc.Stop)
	// Ready once the operator's configuration is in force: the startup
	// probe the webhook gave the container.
	if err := benchharness.WaitHTTPReady("http://"+ports["health-listen"]+"/readyz", o.ReadyTimeout, proc.Alive); err != nil {
		return nil, fmt.Errorf("the sidecar of %s: %w", name, err)
	}
	// And connected to the broker with the credential the operator issued
	// it (readiness does not wait for the broker: the outage buffer
	// covers it; the demo does, so that what it shows next is the mesh).
	if err := benchharness.WaitHTTPBody("http://"+ports["health-listen"]+"/readyz?verbose", "[+]broker ok", o.ReadyTimeout, proc.Alive); err != nil {
		return nil, fmt.Errorf("the sidecar of %s did not reach the broker: %w", name, err)
	}
	if err := markRunning(ctx, o.Cluster, &pod); err != nil {
		return nil, err
	}
	return &Pod{Name: name, Namespace: namespace, NATSURL: "nats://" + ports["listen"], MetricsURL: "http://" + ports["metrics-listen"] + "/metrics",
		Command: append([]string{o.SidecarCommand[0]}, args...), Sidecar: proc}, nil
}

// mount is one of the container's volume mounts, written locally.
type mount struct{ path, local string }

// mountVolumes writes each volume the container mounts into dir, as the
// kubelet would, and returns where each mount path went.
func mountVolumes(ctx context.Context, o Options, pod *corev1.Pod, ctr corev1.Container, dir string) ([]mount, error) {
	var mounts []mount
	for _, m := range ctr.VolumeMounts {
		i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			return nil, fmt.Errorf("pod %s/%s: container %s mounts volume %s, which the pod lacks", pod.Namespace, pod.Name, ctr.Name, m.Name)
		}
		local := filepath.Join(dir, m.Name)
		if err := os.MkdirAll(local, 0o700); err != nil {
			return nil, err
		}
		if err := writeVolume(ctx, o, pod, pod.Spec.Volumes[i], local); err != nil {
			return nil, fmt.Errorf("pod %s/%s, volume %s: %w", pod.Namespace, pod.Name, m.Name, err)
		}
		mounts = append(mounts, mount{path: m.MountPath, local: local})
	}
	return mounts, nil
}

func writeVolume(ctx context.Context, o Options, pod *corev1.Pod, v corev1.Volume, local string) error {
	switch {
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			t := src.ServiceAccountToken
			if t == nil {
				return errors.New("only projected serviceAccountToken sources are run here")
			}
			lifetime := time.Hour
			if t.ExpirationSeconds != nil {
				lifetime = time.Duration(*t.ExpirationSeconds) * time.Second
			}
			file, err := o.Cluster.PodToken(ctx, pod, t.Audience, lifetime, local)
			if err != nil {
				return err
			}
			if err := os.Rename(file, filepath.Join(local, t.Path)); err != nil {
				return err
			}
		}
		return nil
	case v.ConfigMap != nil:
		// The operator publishes its CA bundle into a namespace once it
		// has sidecar pods: the kubelet waits for the ConfigMap too.
		var cm corev1.ConfigMap
		key := types.NamespacedName{Namespace: pod.Namespace, Name: v.ConfigMap.Name}
		deadline := time.Now().Add(o.ReadyTimeout)
		for {
			err := o.Cluster.Client.Get(ctx, key, &cm)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("ConfigMap %s did not appear within %s: %w", key, o.ReadyTimeout, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for k, data := range cm.Data {
			if err := os.WriteFile(filepath.Join(local, k), []byte(data), 0o600); err != nil {
				return err
			}
		}
		return nil
	}
	return errors.New("only projected and configMap volumes are run here")
}

// environment is the container's environment: literal values and the
// downward API's pod fields.
func environment(pod *corev1.Pod, ctr corev1.Container) ([]string, error) {
	fields := map[string]string{"metadata.name": pod.Name, "metadata.namespace": pod.Namespace, "metadata.uid": string(pod.UID)}
	var env []string
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		case e.ValueFrom.FieldRef != nil:
			v, ok := fields[e.ValueFrom.FieldRef.FieldPath]
			if !ok {
				return nil, fmt.Errorf("env %s: field %s is not run here", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env = append(env, e.Name+"="+v)
		default:
			return nil, fmt.Errorf("env %s: only literal values and pod fields are run here", e.Name)
		}
	}
	return env, nil
}

// rewrite turns the injected flags into local ones: listening addresses
// get free ports (returned by flag name), Service addresses resolve
// through services (the operator's keeps its name as the one its
// certificate carries), and files under a mount path move to its local
// copy. Other flags pass unchanged.
func rewrite(flags []string, services map[string]string, mounts []mount) ([]string, map[string]string, error) {
	out := make([]string, 0, len(flags)+1)
	ports := map[string]string{}
	for _, f := range flags {
		name, value, ok := strings.Cut(strings.TrimLeft(f, "-"), "=")
		if !ok {
			out = append(out, f)
			continue
		}
		switch name {
		case "listen", "health-listen", "metrics-listen":
			addr, err := benchharness.FreeAddr()
			if err != nil {
				return nil, nil, err
			}
			ports[name], value = addr, addr
		case "broker":
			u, err := url.Parse(value)
			if err != nil {
				return nil, nil, fmt.Errorf("-broker %q: %w", value, err)
			}
			local, ok := services[u.Host]
			if !ok {
				return nil, nil, fmt.Errorf("-broker %q: no local process serves %s", value, u.Host)
			}
			u.Host = local
			value = u.String()
		case "operator":
			local, ok := services[value]
			if !ok {
				return nil, nil, fmt.Errorf("-operator %q: no local process serves it", value)
			}
			host, _, err := net.SplitHostPort(value)
			if err != nil {
				return nil, nil, fmt.Errorf("-operator %q: %w", value, err)
			}
			out = append(out, "-operator-server-name="+host)
			value = local
		default:
			for _, m := range mounts {
				if rest, ok := strings.CutPrefix(value, m.path+"/"); ok {
					value = filepath.Join(m.local, rest)
					break
				}
			}
		}
		out = append(out, "-"+name+"="+value)
	}
	for _, name := range []string{"listen", "health-listen"} {
		if ports[name] == "" {
			return nil, nil, fmt.Errorf("the injected sidecar has no -%s", name)
		}
	}
	return out, ports, nil
}
