//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// Bounds on every call to the cluster: a command or a request that
// hangs fails its step instead of the whole run.
const (
	kubectlTimeout   = 60 * time.Second
	requestTimeout   = 30 * time.Second
	podHTTPTimeout   = 5 * time.Second
	directTryTimeout = 1500 * time.Millisecond
	stderrTail       = 2000
)

var subscriptionsGVR = schema.GroupVersionResource{Group: "weighstation.io", Version: "v1alpha1", Resource: "subscriptions"}

// cluster is the stories' way to the cluster: kubectl and helm as
// commands (what a user types, printed as run), client-go where a wait or
// a measurement needs a quick, precise call.
type cluster struct {
	cfg  Config
	rest *rest.Config
	kube kubernetes.Interface
	dyn  dynamic.Interface
	http *http.Client

	accessOnce sync.Once
	direct     bool

	// pods caches the probes' pods (their IPs) for the many reads of their
	// stats; an entry is dropped when a read through it fails.
	podsMu sync.Mutex
	pods   map[string]*corev1.Pod
}

func newCluster(cfg Config) (*cluster, error) {
	// The default loading rules read $KUBECONFIG, as kubectl and helm do.
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading KUBECONFIG %s: %w", cfg.Kubeconfig, err)
	}
	rc.QPS, rc.Burst, rc.Timeout = 50, 100, requestTimeout
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("a Kubernetes client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("a dynamic client: %w", err)
	}
	return &cluster{cfg: cfg, rest: rc, kube: kube, dyn: dyn, http: &http.Client{Timeout: podHTTPTimeout}}, nil
}

// started is when the run began; say's times count from it.
var started = time.Now()

// say prints a line of the run's narrative, with the time since it began.
func say(format string, args ...any) {
	fmt.Printf("[%7.1fs] %s\n", time.Since(started).Seconds(), fmt.Sprintf(format, args...))
}

// command runs bin with args (and stdin, when not empty) within timeout,
// and returns its standard output. Its error carries the end of its
// standard error.
func command(ctx context.Context, timeout time.Duration, stdin, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > stderrTail {
			msg = "…" + msg[len(msg)-stderrTail:]
		}
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, msg)
	}
	return stdout.String(), nil
}

// kubectl runs kubectl, bounded by kubectlTimeout.
func (c *cluster) kubectl(ctx context.Context, args ...string) (string, error) {
	return command(ctx, kubectlTimeout, "", c.cfg.Kubectl, args...)
}

// apply is `kubectl apply -f -` of manifests, printed as run.
func (c *cluster) apply(ctx context.Context, what, manifests string) error {
	say("$ kubectl apply -f - # %s", what)
	out, err := command(ctx, kubectlTimeout, manifests, c.cfg.Kubectl, "apply", "-f", "-")
	if err != nil {
		return fmt.Errorf("applying %s: %w", what, err)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		say("  %s", line)
	}
	return nil
}

// helm runs helm within timeout, printed as run.
func (c *cluster) helm(ctx context.Context, timeout time.Duration, args ...string) (string, error) {
	say("$ helm %s", strings.Join(args, " "))
	return command(ctx, timeout, "", c.cfg.Helm, args...)
}

// show prints a kubectl command's output (a table), as a user would see
// it; a failure is printed, not returned: it is for the reader.
func (c *cluster) show(ctx context.Context, args ...string) {
	say("$ kubectl %s", strings.Join(args, " "))
	out, err := c.kubectl(ctx, args...)
	if err != nil {
		say("  (%v)", err)
		return
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		fmt.Println("          " + line)
	}
}

// pod gets a pod.
func (c *cluster) pod(ctx context.Context, ns, name string) (*corev1.Pod, error) {
	p, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("getting pod %s/%s: %w", ns, name, err)
	}
	return p, nil
}

// podGet GETs path on a pod's port: at the pod's IP when the stories run
// inside the cluster's network, else through the apiserver's pod proxy.
func (c *cluster) podGet(ctx context.Context, p *corev1.Pod, port int, path string) ([]byte, error) {
	c.accessOnce.Do(func() {
		switch c.cfg.PodAccess {
		case "direct":
			c.direct = true
		case "auto":
			tctx, cancel := context.WithTimeout(ctx, directTryTimeout)
			defer cancel()
			_, err := c.directGet(tctx, p, port, path)
			c.direct = err == nil
			how := "the pods' IPs"
			if !c.direct {
				how = fmt.Sprintf("the apiserver's pod proxy (a direct GET failed: %v)", err)
			}
			say("reaching pods' HTTP ports through %s", how)
		}
	})
	ctx, cancel := context.WithTimeout(ctx, podHTTPTimeout)
	defer cancel()
	if c.direct {
		return c.directGet(ctx, p, port, path)
	}
	b, err := c.kube.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, strconv.Itoa(port), path, nil).DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET %s:%d%s of pod %s/%s through the apiserver: %w", p.Name, port, path, p.Namespace, p.Name, err)
	}
	return b, nil
}

func (c *cluster) directGet(ctx context.Context, p *corev1.Pod, port int, path string) ([]byte, error) {
	if p.Status.PodIP == "" {
		return nil, fmt.Errorf("pod %s/%s has no IP yet", p.Namespace, p.Name)
	}
	url := fmt.Sprintf("http://%s%s", netJoin(p.Status.PodIP, port), path)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s (pod %s/%s): %w", url, p.Namespace, p.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return b, nil
}

func netJoin(ip string, port int) string {
	if strings.Contains(ip, ":") {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	return fmt.Sprintf("%s:%d", ip, port)
}

// probeStats reads a probe's /stats.
func (c *cluster) probeStats(ctx context.Context, ns, name string) (probestats.Stats, error) {
	key := ns + "/" + name
	c.podsMu.Lock()
	p := c.pods[key]
	c.podsMu.Unlock()
	if p == nil {
		var err error
		if p, err = c.pod(ctx, ns, name); err != nil {
			return probestats.Stats{}, err
		}
	}
	b, err := c.podGet(ctx, p, ProbeStatsPort, "/stats")
	c.podsMu.Lock()
	if c.pods == nil {
		c.pods = map[string]*corev1.Pod{}
	}
	if err != nil || p.Status.PodIP == "" {
		delete(c.pods, key)
	} else {
		c.pods[key] = p
	}
	c.podsMu.Unlock()
	if err != nil {
		return probestats.Stats{}, err
	}
	s, err := probestats.Parse(b)
	if err != nil {
		return probestats.Stats{}, fmt.Errorf("probe %s: %w", name, err)
	}
	return s, nil
}

// metrics scrapes a pod's /metrics on port.
func (c *cluster) metrics(ctx context.Context, p *corev1.Pod, port int) (Samples, error) {
	b, err := c.podGet(ctx, p, port, "/metrics")
	if err != nil {
		return nil, err
	}
	s, err := ParseMetrics(string(b))
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	return s, nil
}

// patchSubscription merge-patches a Subscription's spec.
func (c *cluster) patchSubscription(ctx context.Context, ns, name, patch string) error {
	say("$ kubectl patch subscription %s -n %s --type merge -p '%s'", name, ns, patch)
	_, err := c.dyn.Resource(subscriptionsGVR).Namespace(ns).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("patching Subscription %s/%s: %w", ns, name, err)
	}
	return nil
}

// setKillSwitch engages or releases a Subscription's kill switch
// (spec.killSwitch.engaged, api/v1alpha1/subscription_types.go).
func (c *cluster) setKillSwitch(ctx context.Context, ns, name string, engaged bool, reason string) error {
	patch := `{"spec":{"killSwitch":{"engaged":false,"reason":null}}}`
	if engaged {
		patch = fmt.Sprintf(`{"spec":{"killSwitch":{"engaged":true,"reason":%q}}}`, reason)
	}
	return c.patchSubscription(ctx, ns, name, patch)
}

// deletePod deletes a pod gracefully, printed as run.
func (c *cluster) deletePod(ctx context.Context, ns, name string) error {
	say("$ kubectl delete pod %s -n %s --wait=false", name, ns)
	if err := c.kube.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", ns, name, err)
	}
	return nil
}

// shell runs a command line with sh -c, bounded: the node-side kill.
func shell(ctx context.Context, timeout time.Duration, line string) (string, error) {
	say("$ %s", line)
	return command(ctx, timeout, "", "/bin/sh", "-c", line)
}
