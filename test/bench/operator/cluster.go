package main

import (
	"context"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

const (
	operatorNamespace = kubeenv.OperatorNamespace
	podNamespace      = "bench" // a world of more namespaces names them bench-000, bench-001, ...
	audience          = kubeenv.XDSAudience
	tokenLifetime     = 3 * time.Hour
	groupLabel        = "group"
)

// cluster is a real kube-apiserver and etcd (envtest) and an admin client.
type cluster struct {
	*kubeenv.Cluster
	tokens string
}

func startCluster(crdDir string, namespaces []string) (*cluster, error) {
	kc, err := kubeenv.Start("bench-operator", crdDir, append([]string{operatorNamespace}, namespaces...)...)
	if err != nil {
		return nil, err
	}
	c := &cluster{Cluster: kc, tokens: filepath.Join(kc.Dir, "tokens")}
	if err := os.MkdirAll(c.tokens, 0o700); err != nil {
		kc.Stop()
		return nil, err
	}
	return c, nil
}

// newPod is a sidecar pod of group g in namespace ns, with its own
// ServiceAccount.
func newPod(ns, name string, group int) *corev1.Pod {
	return kubeenv.SidecarPod(ns, name, map[string]string{groupLabel: groupName(group)})
}

// token requests a token bound to the pod for the xDS audience, as the
// kubelet's projected volume would.
func (c *cluster) token(ctx context.Context, p *corev1.Pod, index int) (opproto.Pod, error) {
	file, err := c.PodToken(ctx, p, audience, tokenLifetime, c.tokens)
	if err != nil {
		return opproto.Pod{}, err
	}
	return opproto.Pod{Index: index, Namespace: p.Namespace, Name: p.Name, UID: string(p.UID), TokenFile: file}, nil
}
