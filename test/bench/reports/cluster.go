package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// createPods creates each pod with its ServiceAccount, as its sidecar
// would run: labeled with its groups, with a token bound to it for the
// xDS audience (as the kubelet's projected volume would mount it).
func createPods(ctx context.Context, cl *kubeenv.Cluster, w *world, o options) ([]podIdentity, error) {
	tokens := filepath.Join(cl.Dir, "tokens")
	if err := os.MkdirAll(tokens, 0o700); err != nil {
		return nil, err
	}
	names := make([]string, w.pods)
	for i := range names {
		names[i] = podName(i)
	}
	pods := make([]podIdentity, w.pods)
	_, err := kubeenv.CreateAll(ctx, names, o.inflight, func(ctx context.Context, i int, name string) error {
		if err := cl.CreateServiceAccount(ctx, podNamespace, name); err != nil {
			return err
		}
		p := kubeenv.SidecarPod(podNamespace, name, w.podLabels(i))
		if err := cl.Client.Create(ctx, p); err != nil {
			return fmt.Errorf("creating pod %s: %w", name, err)
		}
		file, err := cl.PodToken(ctx, p, kubeenv.XDSAudience, o.tokenLifetime, tokens)
		pods[i] = podIdentity{Name: name, UID: string(p.UID), TokenFile: file}
		return err
	})
	return pods, err
}

// createObjects creates the Topics and Subscriptions.
func createObjects(ctx context.Context, cl *kubeenv.Cluster, w *world, inflight int) error {
	_, err := kubeenv.CreateAll(ctx, w.objects(), inflight, func(ctx context.Context, _ int, obj ctrlclient.Object) error {
		if err := cl.Client.Create(ctx, obj); err != nil {
			return fmt.Errorf("creating %s: %w", obj.GetName(), err)
		}
		return nil
	})
	return err
}
