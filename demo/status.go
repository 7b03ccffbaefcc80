package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/bench/harness"
)

// pollEvery is how often the demo looks again at what it waits for.
const pollEvery = 100 * time.Millisecond

// waitFor polls check until it holds, a process exits, or the demo's wait
// timeout passes; what names it in the error.
func (d *demo) waitFor(what string, check func() (bool, string)) error {
	if err := benchharness.Poll(d.o.wait, pollEvery, d.alive, check); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	return nil
}

// hold lets the load run for a phase of the demo: a length of the story,
// not a wait for something to happen. It stops early if a process exits.
func (d *demo) hold(dur time.Duration) error {
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		if err := d.alive(); err != nil {
			return err
		}
		time.Sleep(min(500*time.Millisecond, time.Until(end)))
	}
	return nil
}

func (d *demo) subscription(ctx context.Context, name string) (*v1alpha1.Subscription, error) {
	return get[v1alpha1.Subscription](ctx, d, "Subscription", name)
}

func (d *demo) topic(ctx context.Context, name string) (*v1alpha1.Topic, error) {
	return get[v1alpha1.Topic](ctx, d, "Topic", name)
}

// get reads the object of kind named name in the demo's namespace.
func get[T any, P interface {
	*T
	ctrlclient.Object
}](ctx context.Context, d *demo, kind, name string) (*T, error) {
	obj := P(new(T))
	if err := d.cl.Client.Get(ctx, ctrlclient.ObjectKey{Namespace: namespace, Name: name}, obj); err != nil {
		return nil, fmt.Errorf("reading %s %s: %w", kind, name, err)
	}
	return obj, nil
}

// refused is a Topic's refusals for reason over the window.
func refused(t *v1alpha1.Topic, reason string) int64 {
	if t.Status.Publish == nil {
		return 0
	}
	for _, r := range t.Status.Publish.Refused {
		if r.Reason == reason {
			return r.Count
		}
	}
	return 0
}

// podKill is the kill state status reports for one of a Subscription's
// pods.
func podKill(s *v1alpha1.Subscription, pod string) *v1alpha1.PodKill {
	for _, p := range s.Status.Pods {
		if p.Name == pod {
			return p.Killed
		}
	}
	return nil
}

// showTables prints `kubectl get topics,subscriptions`: the latency,
// drops and kill state columns come from the sidecars' reports.
func (d *demo) showTables() error {
	out, err := d.tools.kubectlShow(d.p, "get", "topics,subscriptions", "-n", namespace)
	d.tables = out
	return err
}

// metric finds a sidecar's metric by name and a label value among what
// benchharness.Scrape read.
func metric(m map[string]float64, name, label string) (float64, bool) {
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") && strings.Contains(k, label) {
			return v, true
		}
	}
	return 0, false
}
