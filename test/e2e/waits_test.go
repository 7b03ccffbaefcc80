//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// Poll intervals: API reads every half second; what a measurement reads
// (a probe's stats, a label) every 50-100 ms.
const (
	apiPoll  = 500 * time.Millisecond
	fastPoll = 100 * time.Millisecond
)

// waitPodsReady waits until every named pod of ns is Ready with all its
// containers.
func (c *cluster) waitPodsReady(ctx context.Context, ns string, names []string, timeout time.Duration) (time.Time, error) {
	return Poll(ctx, fmt.Sprintf("pods %s of %s Ready", strings.Join(names, ", "), ns), timeout, apiPoll, func(ctx context.Context) (bool, string) {
		var waiting []string
		for _, name := range names {
			p, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				waiting = append(waiting, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			if why := PodNotReady(p); why != "" {
				waiting = append(waiting, name+": "+why)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, " | ")
	})
}

// waitPodGone waits until the pod of that UID no longer exists (a pod of
// the same name may be there again: a StatefulSet's).
func (c *cluster) waitPodGone(ctx context.Context, ns, name string, uid types.UID, timeout time.Duration) (time.Time, error) {
	return Poll(ctx, fmt.Sprintf("pod %s/%s (uid %s) gone", ns, name, uid), timeout, fastPoll, func(ctx context.Context) (bool, string) {
		p, err := c.kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return true, ""
		case err != nil:
			return false, err.Error()
		case p.UID != uid:
			return true, ""
		}
		return false, fmt.Sprintf("still there (%s)", p.Status.Phase)
	})
}

// waitWorkloadsReady waits until every Deployment and StatefulSet of ns is
// rolled out and Ready.
func (c *cluster) waitWorkloadsReady(ctx context.Context, ns string, timeout time.Duration) (time.Time, error) {
	return Poll(ctx, "every Deployment and StatefulSet of "+ns+" Ready", timeout, apiPoll, func(ctx context.Context) (bool, string) {
		deployments, err := c.kube.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		sets, err := c.kube.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		if len(deployments.Items)+len(sets.Items) == 0 {
			return false, "no Deployment or StatefulSet"
		}
		var waiting []string
		for i := range deployments.Items {
			if why := DeploymentNotReady(&deployments.Items[i]); why != "" {
				waiting = append(waiting, "deployment/"+deployments.Items[i].Name+": "+why)
			}
		}
		for i := range sets.Items {
			if why := StatefulSetNotReady(&sets.Items[i]); why != "" {
				waiting = append(waiting, "statefulset/"+sets.Items[i].Name+": "+why)
			}
		}
		return len(waiting) == 0, strings.Join(waiting, " | ")
	})
}

// componentSelector selects the release's operator or broker pods.
func componentSelector(component string) string {
	return labels.SelectorFromSet(labels.Set{InstanceLabel: ReleaseName, ComponentLabel: component}).String()
}

// leadership is who leads: the operator pods carrying the leader label,
// and the Lease's holder.
type leadership struct {
	Labelled []string
	Holder   string // the Lease's holderIdentity
}

// Pod is the leader when exactly one pod carries the label and it holds
// the Lease; "" otherwise.
func (l leadership) Pod() string {
	if len(l.Labelled) == 1 && HolderPod(l.Holder) == l.Labelled[0] {
		return l.Labelled[0]
	}
	return ""
}

func (l leadership) String() string {
	return fmt.Sprintf("labelled %v, Lease held by %q", l.Labelled, l.Holder)
}

func (c *cluster) leadership(ctx context.Context) (leadership, error) {
	ns := c.cfg.ReleaseNamespace
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(ComponentOperator)})
	if err != nil {
		return leadership{}, fmt.Errorf("listing the operator's pods: %w", err)
	}
	var l leadership
	for _, p := range pods.Items {
		if p.Labels[LeaderLabel] == "true" && p.DeletionTimestamp == nil {
			l.Labelled = append(l.Labelled, p.Name)
		}
	}
	slices.Sort(l.Labelled)
	lease, err := c.kube.CoordinationV1().Leases(ns).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil {
		return l, fmt.Errorf("getting the Lease %s/%s: %w", ns, LeaseName, err)
	}
	if lease.Spec.HolderIdentity != nil {
		l.Holder = *lease.Spec.HolderIdentity
	}
	return l, nil
}

// waitLeader waits for one leader (label and Lease agreeing) other than
// notPod and whose Lease identity is not notHolder (either may be empty).
func (c *cluster) waitLeader(ctx context.Context, timeout time.Duration, notPod, notHolder string) (string, time.Time, error) {
	var leader string
	at, err := Poll(ctx, "one operator pod leading (label "+LeaderLabel+" and the Lease)", timeout, fastPoll, func(ctx context.Context) (bool, string) {
		l, err := c.leadership(ctx)
		if err != nil {
			return false, err.Error()
		}
		leader = l.Pod()
		return leader != "" && leader != notPod && (notHolder == "" || l.Holder != notHolder), l.String()
	})
	return leader, at, err
}
