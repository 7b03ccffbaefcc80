package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
	"github.com/weighstation/weighstation/test/bench/propagation/swarmproto"
)

// The objects of the bench. One Subscription selects every pod; the Topic
// gives the pods a shared resource besides it, as a real namespace has.
const (
	operatorNamespace = "weighstation-system"
	podNamespace      = "bench"
	subscriptionName  = "orders"
	topicName         = "orders"
	podLabel          = "app"
	podLabelValue     = "bench"
	xdsService        = "weighstation-xds"
	audience          = "weighstation.io/xds"
	tokenLifetime     = time.Hour
)

// cluster is a real kube-apiserver and etcd (envtest) and an admin client.
type cluster struct{ *kubeenv.Cluster }

func startCluster(crdDir string) (*cluster, error) {
	kc, err := kubeenv.Start("bench-propagation", crdDir, operatorNamespace, podNamespace)
	if err != nil {
		return nil, err
	}
	return &cluster{kc}, nil
}

// populate creates the Topic, the Subscription and n
// ServiceAccounts and Pods (scheduled by hand: envtest has no scheduler,
// and no ServiceAccount controller), and requests each pod a token bound
// to it for the xDS audience, as the kubelet's projected volume would.
func (c *cluster) populate(ctx context.Context, n int) ([]swarmproto.Pod, error) {
	objects := []ctrlclient.Object{
		&v1alpha1.Topic{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: topicName},
			Spec:       v1alpha1.TopicSpec{Subject: "orders.>", Limits: v1alpha1.TopicLimits{MaxMessageBytes: 4096}},
		},
		&v1alpha1.Subscription{
			ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subscriptionName},
			Spec: v1alpha1.SubscriptionSpec{
				Subject:    "orders.*",
				Essential:  ptr.To(false),
				Selector:   metav1.LabelSelector{MatchLabels: map[string]string{podLabel: podLabelValue}},
				KillSwitch: &v1alpha1.KillSwitch{Engaged: false},
			},
		},
	}
	for _, obj := range objects {
		if err := c.Client.Create(ctx, obj); err != nil {
			return nil, fmt.Errorf("creating %s: %w", obj.GetName(), err)
		}
	}
	tokens := filepath.Join(c.Dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return nil, err
	}
	pods := make([]swarmproto.Pod, n)
	errs := make([]error, n)
	// A few workers: the apiserver shares the two cores with everything
	// else, and creating pods is setup, not what is measured.
	const workers = 8
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				pods[i], errs[i] = c.createPod(ctx, i, tokens)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return pods, nil
}

func (c *cluster) createPod(ctx context.Context, i int, tokens string) (swarmproto.Pod, error) {
	name := fmt.Sprintf("sidecar-%04d", i)
	if err := c.CreateServiceAccount(ctx, podNamespace, name); err != nil {
		return swarmproto.Pod{}, err
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: name, Labels: map[string]string{
			v1alpha1.InjectLabel: v1alpha1.InjectEnabled,
			podLabel:             podLabelValue,
		}},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: name,
			Containers:         []corev1.Container{{Name: "app", Image: "app"}},
		},
	}
	if err := c.Client.Create(ctx, p); err != nil {
		return swarmproto.Pod{}, fmt.Errorf("creating pod %s: %w", name, err)
	}
	file, err := c.PodToken(ctx, p, audience, tokenLifetime, tokens)
	if err != nil {
		return swarmproto.Pod{}, err
	}
	return swarmproto.Pod{Name: name, UID: string(p.UID), TokenFile: file}, nil
}

// setKillSwitch flips the Subscription's kill switch with a merge PATCH,
// as `kubectl patch --type=merge` does.
func (c *cluster) setKillSwitch(ctx context.Context, engaged bool) error {
	sub := &v1alpha1.Subscription{ObjectMeta: metav1.ObjectMeta{Namespace: podNamespace, Name: subscriptionName}}
	body := fmt.Appendf(nil, `{"spec":{"killSwitch":{"engaged":%t}}}`, engaged)
	return c.Client.Patch(ctx, sub, ctrlclient.RawPatch(types.MergePatchType, body))
}
