package system_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/grpc/credentials/insecure"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// createPod creates a ServiceAccount and a scheduled sidecar Pod, and
// returns a token the apiserver issued for it with audience.
func createPod(t *testing.T, ns, name, audience string) (*corev1.Pod, string) {
	t.Helper()
	ctx := background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8sClient.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: name, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8sClient.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptr.To[int64](3600),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: name, UID: p.UID},
	}}
	if err := k8sClient.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return p, tr.Status.Token
}

// TestStreamsProveTheirPodWithApiserverTokens: the xDS server believes a
// stream only what the apiserver's TokenReview says of its token.
func TestStreamsProveTheirPodWithApiserverTokens(t *testing.T) {
	ns, other := newNamespace(t), newNamespace(t)
	xdsAddr := natstest.FreeAddr(t)
	op := startOperator(t, xdsAddr)
	a, tokenA := createPod(t, ns, "app-0", audience)
	createPod(t, ns, "app-1", audience)
	createPod(t, other, "app-0", audience) // the same pod name in another namespace
	_, wrongAudience := createPod(t, ns, "app-2", "https://kubernetes.default.svc")
	eventually(t, "the operator computed every pod", func() error {
		if !op.pub.Synced() {
			return fmt.Errorf("not synced")
		}
		return nil
	})
	tests := []struct {
		name, ns, pod, uid, token, want string
	}{
		{name: "another pod's token", ns: ns, pod: "app-1", token: tokenA, want: fmt.Sprintf(`node ID "%s/app-1" does not match the token's pod "%s/app-0"`, ns, ns)},
		{name: "the same pod name in another namespace", ns: other, pod: "app-0", token: tokenA, want: fmt.Sprintf(`node ID "%s/app-0" does not match the token's pod "%s/app-0"`, other, ns)},
		{name: "a token for another audience", ns: ns, pod: "app-2", token: wrongAudience, want: "Unauthenticated"},
		{name: "a forged token", ns: ns, pod: "app-0", token: "eyJhbGciOiJub25lIn0.eyJleHAiOjQxMDI0NDQ4MDB9.x", want: "Unauthenticated"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "token")
			if err := os.WriteFile(file, []byte(tc.token), 0o600); err != nil {
				t.Fatal(err)
			}
			var applied []meshconfig.PodConfig
			link := startLink(t, xdsclient.Options{
				Address: xdsAddr, Namespace: tc.ns, Pod: tc.pod, TokenFile: file,
				Apply: func(cfg meshconfig.PodConfig) error { applied = append(applied, cfg); return nil },
			})
			eventually(t, "the stream is refused", func() error {
				if st := link.XDS.Stats(); !strings.Contains(st.LastError, tc.want) {
					return fmt.Errorf("last error %q, want %q", st.LastError, tc.want)
				}
				return nil
			})
			link.Close()
			if len(applied) != 0 || link.XDS.Version() != "" {
				t.Fatalf("a refused stream received a configuration: %+v", applied)
			}
		})
	}
	// The rightful owner is admitted (and the check above was not vacuous).
	p := &pod{name: a.Name}
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tokenA), 0o600); err != nil {
		t.Fatal(err)
	}
	p.client = startLink(t, xdsclient.Options{
		Address: xdsAddr, Namespace: ns, Pod: a.Name, PodUID: string(a.UID), TokenFile: file,
		Apply: func(meshconfig.PodConfig) error { return nil },
	}).XDS
	waitConfigured(t, op, ns, p, "the owner is configured", func(meshconfig.PodConfig) error { return nil })
}

// startLink runs the operator-facing half of a sidecar alone (its xDS
// client, no reports, no credential) in plain text, as a caller that holds
// some pod's token may; the test's end closes it.
func startLink(t *testing.T, opts xdsclient.Options) *sidecarapp.OperatorLink {
	t.Helper()
	opts.Credentials, opts.Log = insecure.NewCredentials(), logr.Discard()
	link, err := sidecarapp.NewOperatorLink(sidecarapp.LinkOptions{XDS: opts, Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	link.Start(context.Background())
	t.Cleanup(link.Close)
	return link
}
