package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/test/bench/harness/kubeenv"
)

// statusWrite is one update of a Topic or Subscription that left its
// generation alone (a status write), as the bench's watch saw it, and whose
// part of the status changed: the reconcilers' (observedGeneration, the
// Topic's subscriptions, Valid, Conflicting, KillSwitchEngaged) or
// propagation's (config, Ready, ConfigRejected), per the ownership table in
// api/v1alpha1.
type statusWrite struct {
	at   time.Time
	kind string // "topic" or "subscription"
	ns   string
	name string
	by   string // "reconciler", "propagation", "both" or "other"
}

type watched struct {
	generation int64
	rv         string
	reconciler string
	propagated string
	ready      bool
}

// statusWatch watches every Topic and Subscription of the world: it
// counts status writes and tells when the world is Ready.
type statusWatch struct {
	world *world
	ctx   context.Context

	mu     sync.Mutex
	objs   map[string]map[string]*watched // kind -> namespace/name -> last seen
	writes []statusWrite
	// readySince is when every Subscription and every Topic with a
	// publishers selector came to report Ready with appliedPods ==
	// totalPods == its group's size (zero: not all do).
	readySince time.Time
	nReady     int
	last       time.Time // the last event
	events     int
	errs       []string
}

func startStatusWatch(ctx context.Context, c ctrlclient.WithWatch, w *world) *statusWatch {
	s := &statusWatch{world: w, ctx: ctx, objs: map[string]map[string]*watched{"topic": {}, "subscription": {}}}
	for kind, newList := range map[string]func() ctrlclient.ObjectList{
		"topic":        func() ctrlclient.ObjectList { return &v1alpha1.TopicList{} },
		"subscription": func() ctrlclient.ObjectList { return &v1alpha1.SubscriptionList{} },
	} {
		go kubeenv.Watch(ctx, c, w.watchNamespace(), newList,
			func(typ watch.EventType, obj ctrlclient.Object) { s.observe(kind, typ, obj) },
			func(err error) { s.fail(kind, err) })
	}
	return s
}

func (s *statusWatch) fail(kind string, err error) {
	if s.ctx.Err() != nil {
		return // the bench is stopping
	}
	fmt.Fprintf(os.Stderr, "bench-operator: watching %ss: %v\n", kind, err)
	s.mu.Lock()
	s.errs = append(s.errs, fmt.Sprintf("%s: %v", kind, err))
	s.mu.Unlock()
}

// parts returns the reconcilers' and propagation's parts of the status,
// and whether it reports Ready with appliedPods == totalPods.
func parts(obj ctrlclient.Object) (reconciler, propagated string, ready bool, totalPods int32) {
	var conds []metav1.Condition
	var cfg *v1alpha1.ConfigStatus
	var rec []any
	switch o := obj.(type) {
	case *v1alpha1.Topic:
		conds, cfg = o.Status.Conditions, o.Status.Config
		rec = append(rec, o.Status.ObservedGeneration, o.Status.Subscriptions)
	case *v1alpha1.Subscription:
		conds, cfg = o.Status.Conditions, o.Status.Config
		rec = append(rec, o.Status.ObservedGeneration)
	}
	var prop []any
	prop = append(prop, cfg)
	for _, c := range conds {
		switch c.Type {
		case v1alpha1.ConditionReady, v1alpha1.ConditionConfigRejected:
			prop = append(prop, c)
		default:
			rec = append(rec, c)
		}
	}
	rb, _ := json.Marshal(rec)
	pb, _ := json.Marshal(prop)
	r := meta.FindStatusCondition(conds, v1alpha1.ConditionReady)
	ready = r != nil && r.Status == metav1.ConditionTrue && r.ObservedGeneration == obj.GetGeneration() &&
		cfg != nil && cfg.AppliedPods == cfg.TotalPods
	if cfg != nil {
		totalPods = cfg.TotalPods
	}
	return string(rb), string(pb), ready, totalPods
}

func (s *statusWatch) observe(kind string, typ watch.EventType, obj ctrlclient.Object) {
	now := time.Now()
	rec, prop, ready, total := parts(obj)
	// Only Subscriptions and Topics with a publishers selector count pods.
	counted := kind == "subscription"
	expected := 0
	n, inWorld := s.world.nsIndex[obj.GetNamespace()]
	switch o := obj.(type) {
	case *v1alpha1.Subscription:
		expected = s.world.groupSize(n, s.world.subGroup(o.Name))
	case *v1alpha1.Topic:
		counted = o.Spec.Publishers != nil
		if counted {
			var j int
			if _, err := fmt.Sscanf(o.Name, "t-%d", &j); err == nil {
				expected = s.world.groupSize(n, s.world.publisherGroup(j))
			}
		}
	}
	counted = counted && inWorld
	ready = ready && counted && int(total) == expected

	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.events = now, s.events+1
	m := s.objs[kind]
	name, key := obj.GetName(), obj.GetNamespace()+"/"+obj.GetName()
	old, seen := m[key]
	wasReady := seen && old.ready
	switch typ {
	case watch.Deleted:
		delete(m, key)
		ready = false
	default:
		if seen && typ == watch.Modified && old.generation == obj.GetGeneration() && old.rv != obj.GetResourceVersion() {
			by := "other"
			switch {
			case old.reconciler != rec && old.propagated != prop:
				by = "both"
			case old.reconciler != rec:
				by = "reconciler"
			case old.propagated != prop:
				by = "propagation"
			}
			s.writes = append(s.writes, statusWrite{at: now, kind: kind, ns: obj.GetNamespace(), name: name, by: by})
		}
		m[key] = &watched{generation: obj.GetGeneration(), rv: obj.GetResourceVersion(), reconciler: rec, propagated: prop, ready: ready}
	}
	if ready != wasReady {
		if ready {
			s.nReady++
		} else {
			s.nReady--
		}
	}
	want := s.world.counted()
	switch {
	case s.nReady == want && s.readySince.IsZero():
		s.readySince = now
	case s.nReady < want:
		s.readySince = time.Time{}
	}
}

// ready returns when the world came to be Ready (zero: it is not), and how
// many of the counted objects are.
func (s *statusWatch) ready() (time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readySince, s.nReady
}

// lastEvent is when the watch last saw a change.
func (s *statusWatch) lastEvent() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// writesBetween returns the status writes seen in [from, to].
func (s *statusWatch) writesBetween(from, to time.Time) []statusWrite {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []statusWrite
	for _, w := range s.writes {
		if !w.at.Before(from) && !w.at.After(to) {
			out = append(out, w)
		}
	}
	return out
}

func (s *statusWatch) errors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.errs...)
}
