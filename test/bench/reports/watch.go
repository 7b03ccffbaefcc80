package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// statusWrite is one update of a Subscription or Topic, as the bench's
// watch saw it, that kept the generation (a status write) and changed the
// part of the status the report writer owns (api/v1alpha1's ownership
// table: aggregate, pods, dropped, killed, Degraded; a Topic's publish).
type statusWrite struct {
	at         time.Time
	kind, name string
}

type seen struct {
	kind       string
	generation int64
	rv         string
	reported   string // the report writer's part, as JSON
	reporting  bool   // it has an aggregate (a Topic: publish counts)
}

// writeWatch watches the namespace's Subscriptions and Topics and records
// every report write; other status writes (propagation's, the
// reconcilers') are only counted.
type writeWatch struct {
	ctx context.Context

	mu     sync.Mutex
	objs   map[string]*seen // by kind/name
	writes []statusWrite
	other  []time.Time
	errs   []string
}

func startWriteWatch(ctx context.Context, c ctrlclient.WithWatch) *writeWatch {
	w := &writeWatch{ctx: ctx, objs: map[string]*seen{}}
	for kind, newList := range map[string]func() ctrlclient.ObjectList{
		"topic":        func() ctrlclient.ObjectList { return &v1alpha1.TopicList{} },
		"subscription": func() ctrlclient.ObjectList { return &v1alpha1.SubscriptionList{} },
	} {
		go kubeenv.Watch(ctx, c, podNamespace, newList,
			func(typ watch.EventType, obj ctrlclient.Object) { w.observe(kind, typ, obj) },
			func(err error) { w.fail(kind, err) })
	}
	return w
}

func (w *writeWatch) fail(kind string, err error) {
	if w.ctx.Err() != nil {
		return // the bench is stopping
	}
	benchharness.Progress("watching %ss: %v", kind, err)
	msg := fmt.Sprintf("%s: %v", kind, err)
	if errors.Is(err, kubeenv.ErrRelisted) {
		msg += " (the counts miss what changed in between)"
	}
	w.mu.Lock()
	w.errs = append(w.errs, msg)
	w.mu.Unlock()
}

// reportedPart is the report writer's part of an object's status, and
// whether it holds a summary.
func reportedPart(obj ctrlclient.Object) (string, bool) {
	var part any
	var reporting bool
	switch o := obj.(type) {
	case *v1alpha1.Subscription:
		st := o.Status
		part = []any{st.Aggregate, st.Pods, st.Dropped, st.Killed, meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)}
		reporting = st.Aggregate != nil
	case *v1alpha1.Topic:
		part = o.Status.Publish
		reporting = o.Status.Publish != nil
	}
	b, _ := json.Marshal(part)
	return string(b), reporting
}

func (w *writeWatch) observe(kind string, typ watch.EventType, obj ctrlclient.Object) {
	now := time.Now()
	key := kind + "/" + obj.GetName()
	rep, reporting := reportedPart(obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	if typ == watch.Deleted {
		delete(w.objs, key)
		return
	}
	old, ok := w.objs[key]
	if ok && typ == watch.Modified && old.generation == obj.GetGeneration() && old.rv != obj.GetResourceVersion() {
		if old.reported != rep {
			w.writes = append(w.writes, statusWrite{at: now, kind: kind, name: obj.GetName()})
		} else {
			w.other = append(w.other, now)
		}
	}
	w.objs[key] = &seen{kind: kind, generation: obj.GetGeneration(), rv: obj.GetResourceVersion(), reported: rep, reporting: reporting}
}

// between returns the report writes and the number of other status
// writes seen in [from, to).
func (w *writeWatch) between(from, to time.Time) ([]statusWrite, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []statusWrite
	for _, x := range w.writes {
		if !x.at.Before(from) && x.at.Before(to) {
			out = append(out, x)
		}
	}
	other := 0
	for _, at := range w.other {
		if !at.Before(from) && at.Before(to) {
			other++
		}
	}
	return out, other
}

// reporting is how many objects of kind have a summary in their status.
func (w *writeWatch) reporting(kind string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.objs {
		if s.kind == kind && s.reporting {
			n++
		}
	}
	return n
}

func (w *writeWatch) errors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.errs...)
}
