package reviewtest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

const audience = "weighstation.io/xds"

var k8sClient client.Client

func TestMain(m *testing.M) {
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	os.Exit(envtestsuite.Run(m, scheme, nil, func(env *envtestsuite.Env) int {
		k8sClient = env.Client
		return m.Run()
	}))
}

// countingClient counts the TokenReviews it sends to the apiserver.
type countingClient struct {
	client.Client
	reviews atomic.Int64
}

func (c *countingClient) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if _, ok := obj.(*authenticationv1.TokenReview); ok {
		c.reviews.Add(1)
	}
	return c.Client.Create(ctx, obj, opts...)
}

// sidecarPod creates a scheduled sidecar pod with its own ServiceAccount
// (envtest has neither scheduler nor ServiceAccount controller) and
// returns it with a token bound to it for the xDS audience, as the
// kubelet's projected volume would.
func sidecarPod(t *testing.T, ns, name string) (*corev1.Pod, string) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := k8sClient.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{v1alpha1.InjectLabel: v1alpha1.InjectEnabled}},
		Spec:       corev1.PodSpec{NodeName: "node-1", ServiceAccountName: name, Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}
	if err := k8sClient.SubResource("token").Create(ctx, sa, tr); err != nil {
		t.Fatal(err)
	}
	return pod, tr.Status.Token
}

// forged is token with its claims changed (a new jti, so that each forged
// token is another), its header and signature kept: well-formed, for the
// audience, unexpired, bound to the real pod, and not signed.
func forged(t *testing.T, token string, i int) string {
	t.Helper()
	parts := strings.Split(token, ".")
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	claims["jti"] = fmt.Sprintf("forged-%d", i)
	b, err = json.Marshal(claims)
	if err != nil {
		t.Fatal(err)
	}
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
}

func fromPeer(ip string) context.Context {
	return peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(ip), Port: 50000}})
}

// A flood of forged tokens of a real pod from 200 peers, and the pod's
// valid token replayed among them: the apiserver receives at most the
// global burst plus the rate over the flood's duration, plus one review of
// the valid token. Then the pod is deleted, and its cached token refused
// without a review.
func TestAFloodAtARealAPIServer(t *testing.T) {
	ns := envtestsuite.NewNamespace(t, k8sClient, "review-")
	pod, token := sidecarPod(t, ns, "billing-0")
	counting := &countingClient{Client: k8sClient}
	limits := xds.ReviewLimits{Rate: 50, Burst: 20, PeerRate: 1, PeerBurst: 3, CacheSize: 100, CacheTTL: 10 * time.Minute}
	reg := prometheus.NewRegistry()
	// The pods are read from the apiserver, not a cache: what the
	// operator's pod cache would hold once it caught up.
	gate, err := xds.NewTokenGate(xds.TokenReviewer{Client: counting, Pods: k8sClient, Audience: audience}, limits, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	id, err := gate.Authenticate(fromPeer("10.9.0.1"), token)
	if err != nil || id.PodUID != string(pod.UID) {
		t.Fatalf("the pod's own token: %v, %+v", err, id)
	}

	const attempts = 3000
	codesSeen := map[codes.Code]int{}
	start := time.Now()
	for i := range attempts {
		tok := token
		if i%10 != 0 {
			tok = forged(t, token, i)
		}
		_, err := gate.Authenticate(fromPeer(fmt.Sprintf("10.10.0.%d", i%200+1)), tok)
		if tok == token && err != nil {
			t.Fatalf("attempt %d, the valid token replayed: %v", i, err)
		}
		codesSeen[status.Code(err)]++
	}
	elapsed := time.Since(start)
	maxReviews := 1 + int64(float64(limits.Burst)+limits.Rate*elapsed.Seconds()) + 1
	got := counting.reviews.Load()
	t.Logf("%d attempts in %s: %d TokenReviews (at most %d), refusals by code %v", attempts, elapsed.Round(time.Millisecond), got, maxReviews, codesSeen)
	if got > maxReviews {
		t.Fatalf("%d TokenReviews in %s, want at most 1 (the valid token) + burst %d + %g/s", got, elapsed, limits.Burst, limits.Rate)
	}
	if codesSeen[codes.Unauthenticated] == 0 || codesSeen[codes.Unavailable]+codesSeen[codes.ResourceExhausted] == 0 {
		t.Fatalf("refusals %v: want the apiserver's and the rate limit's", codesSeen)
	}

	// The pod goes: its token, still cached and still signed, dies with
	// it, without asking the apiserver.
	if err := k8sClient.Delete(context.Background(), pod, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	envtestsuite.Eventually(t, 20*time.Second, 20*time.Millisecond, "the pod is gone", func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(pod), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
	before := counting.reviews.Load()
	_, err = gate.Authenticate(fromPeer("10.9.0.1"), token)
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "token_pod_gone") {
		t.Fatalf("the deleted pod's token: %v, want Unauthenticated naming token_pod_gone", err)
	}
	if n := counting.reviews.Load() - before; n != 0 {
		t.Fatalf("%d TokenReviews for a cached token of a deleted pod, want 0", n)
	}
}
