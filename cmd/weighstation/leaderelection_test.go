package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/cmd/weighstation/operatorapp"
	"github.com/weighstation/weighstation/controllers/leaderlabel"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
)

// replica is one `weighstation operator` process.
type replica struct {
	pod, xdsAddr string
	cmd          *exec.Cmd
	logs         *proctest.LockedBuffer
	exited       chan error
}

// startReplica runs an operator process as pod of namespace ns, with
// leader election timings short enough for a takeover in seconds.
func startReplica(t *testing.T, kubeconfig, ns, pod string) *replica {
	t.Helper()
	r := &replica{pod: pod, xdsAddr: natstest.FreeAddr(t), logs: &proctest.LockedBuffer{}, exited: make(chan error, 1)}
	// No -leader-election-namespace: the Lease goes in -namespace.
	r.cmd = exec.Command(buildBinary(t), "operator", "-kubeconfig", kubeconfig, "-namespace", ns, "-pod-name", pod,
		"-metrics-bind-address", "0", "-health-probe-bind-address", "0", "-xds-listen", r.xdsAddr, "-ca-bundle-resync", "200ms",
		"-leader-elect-lease-duration", "2s", "-leader-elect-renew-deadline", "1500ms", "-leader-elect-retry-period", "200ms")
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s's logs:\n%s", pod, r.logs)
		}
		if err := r.stop(); err != nil {
			t.Error(err)
		}
	})
	return r
}

// stop sends SIGTERM and waits for a clean exit. It does nothing on a
// replica that has already stopped.
func (r *replica) stop() error { return r.signal(syscall.SIGTERM) }

// signal sends sig and waits for the process to end: cleanly after
// SIGTERM, killed after SIGKILL.
func (r *replica) signal(sig syscall.Signal) error {
	if r.cmd.ProcessState != nil {
		return nil
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		return err
	}
	select {
	case err := <-r.exited:
		if sig == syscall.SIGKILL {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s exited with %v after %s", r.pod, err, sig)
		}
		return nil
	case <-time.After(30 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.exited
		return fmt.Errorf("%s did not stop within 30s of %s", r.pod, sig)
	}
}

// TestLeaderElectionTakeover runs two operator replicas, as their
// ServiceAccount with the generated RBAC: exactly one leads, labels its pod
// and serves xDS while the other refuses streams; when the leader stops,
// the other takes over within seconds, labels its pod, and then serves. A
// leader stopped by SIGTERM gives its Lease up; a killed one leaves it to
// expire (-leader-elect-lease-duration, 2s here).
func TestLeaderElectionTakeover(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM releases the Lease", syscall.SIGTERM}, {"SIGKILL leaves it to expire", syscall.SIGKILL}} {
		t.Run(tc.name, func(t *testing.T) { testTakeover(t, tc.sig) })
	}
}

func testTakeover(t *testing.T, sig syscall.Signal) {
	const opNs, appNs = "weighstation-system", "default"
	c, kubeconfig := startAPIServer(t, opNs)
	ctx := context.Background()
	for _, name := range []string{"operator-a", "operator-b"} {
		if err := c.Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: opNs, Name: name},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "weighstation"}}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	app, token := sidecarPod(t, c, appNs, "app-0")
	replicas := []*replica{startReplica(t, kubeconfig, opNs, "operator-a"), startReplica(t, kubeconfig, opNs, "operator-b")}

	var leader, follower *replica
	waitFor(t, "one replica leads and labels its pod", func() error {
		labelled, err := leaderPods(ctx, c, opNs)
		if err != nil {
			return err
		}
		if len(labelled) != 1 {
			return fmt.Errorf("labelled pods %v, want one", labelled)
		}
		for _, r := range replicas {
			if r.pod == labelled[0] {
				leader = r
			} else {
				follower = r
			}
		}
		return nil
	})
	firstHolder := leaseHolder(t, c, opNs)
	creds := xdsCredentials(t, c, appNs, opNs)
	waitFor(t, "the leader serves the sidecar", func() error {
		return xdsServes(leader.xdsAddr, creds, token, appNs, app.Name)
	})
	// The follower's xDS server listens once its manager has started, and
	// completes a TLS handshake once it holds its serving certificate:
	// under load, both can come after the leader serves. Until then it
	// answers nothing; then it must refuse, never serve.
	waitFor(t, "the follower answers a sidecar", func() error {
		err := xdsServes(follower.xdsAddr, creds, token, appNs, app.Name)
		switch {
		case err == nil:
			t.Fatalf("the follower %s served a sidecar, want Unavailable: does not serve configuration now", follower.pod)
		case isNotServing(err):
			return nil
		}
		return err // not listening, or no certificate yet
	})
	if labelled, err := leaderPods(ctx, c, opNs); err != nil || len(labelled) != 1 || labelled[0] != leader.pod {
		t.Fatalf("labelled pods %v (%v), want only %s", labelled, err, leader.pod)
	}

	stopped := time.Now()
	if err := leader.signal(sig); err != nil {
		t.Fatal(err)
	}
	waitForWithin(t, 15*time.Second, "the follower takes the Lease over and labels its pod", func() error {
		var pod corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: opNs, Name: follower.pod}, &pod); err != nil {
			return err
		}
		if pod.Labels[leaderlabel.Label] != "true" {
			return fmt.Errorf("labels %v", pod.Labels)
		}
		return nil
	})
	waitForWithin(t, 15*time.Second, "the new leader serves the sidecar", func() error {
		return xdsServes(follower.xdsAddr, creds, token, appNs, app.Name)
	})
	t.Logf("takeover: %s from the leader's %s to the new leader serving", time.Since(stopped).Round(time.Millisecond), sig)
	if holder := leaseHolder(t, c, opNs); holder == firstHolder {
		t.Fatalf("the Lease is still held by %s", holder)
	}
	for _, r := range replicas {
		noRBACRefusals(t, r.logs.String())
	}
}

// sidecarPod creates a scheduled sidecar pod with a ServiceAccount of its
// own, and returns it with a token for the xDS audience bound to it.
func sidecarPod(t *testing.T, c client.Client, ns, name string) (*corev1.Pod, string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: name, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{operatorapp.DefaultXDSAudience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := c.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return pod, tr.Status.Token
}

// leaderPods lists the pods of ns that carry the leader label.
func leaderPods(ctx context.Context, c client.Client, ns string) ([]string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{leaderlabel.Label: "true"}); err != nil {
		return nil, err
	}
	var names []string
	for _, p := range pods.Items {
		names = append(names, p.Name)
	}
	return names, nil
}

// leaseHolder is the holder of the operator's Lease in ns, which must exist.
func leaseHolder(t *testing.T, c client.Client, ns string) string {
	t.Helper()
	var lease coordinationv1.Lease
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: operatorapp.LeaderElectionID}, &lease); err != nil {
		t.Fatalf("the leader election Lease in %s: %v", ns, err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("the Lease in %s has no holder", ns)
	}
	return *lease.Spec.HolderIdentity
}

// xdsCredentials trusts the CA bundle that the leader publishes into the
// sidecar's namespace, for the xDS Service's name, as a sidecar does.
func xdsCredentials(t *testing.T, c client.Client, appNs, opNs string) credentials.TransportCredentials {
	t.Helper()
	pool := x509.NewCertPool()
	waitFor(t, "the CA bundle is published into the sidecar's namespace", func() error {
		var cm corev1.ConfigMap
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: appNs, Name: "weighstation-ca-bundle"}, &cm); err != nil {
			return err
		}
		if !pool.AppendCertsFromPEM([]byte(cm.Data["ca.crt"])) {
			return errors.New("no certificate in the bundle")
		}
		return nil
	})
	return credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "weighstation-xds." + opNs + ".svc", MinVersion: tls.VersionTLS12})
}

// xdsServes opens one delta ADS stream to addr as the pod and returns nil
// once the pod's own resource arrives, or the status that ended the stream.
func xdsServes(addr string, creds credentials.TransportCredentials, token, ns, pod string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err != nil {
		return err
	}
	own := xdsresource.PodName(ns, pod)
	// A refused stream may be over before the request is sent: Recv says
	// why.
	_ = st.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: own}, TypeUrl: xdsresource.TypeURL, ResourceNamesSubscribe: []string{own}})
	for {
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		for _, r := range resp.GetResources() {
			if r.GetName() == own {
				return nil
			}
		}
	}
}

// isNotServing reports whether err is a replica's refusal to serve.
func isNotServing(err error) bool {
	s, ok := status.FromError(err)
	return ok && s.Code() == codes.Unavailable && strings.Contains(s.Message(), "does not serve configuration now")
}
