package controllers

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/meshconfig"
)

// Setup is what the reconcilers need.
type Setup struct {
	// Sink receives every sidecar pod's desired configuration.
	Sink desired.Sink
	// AccessMode is the access mode of the pods of namespaces without the
	// v1alpha1.AccessModeLabel label (-access-mode; empty: enforce).
	AccessMode string
	// Defaults govern subjects that no Topic matches.
	Defaults meshconfig.Defaults
	// MaxTopicsPerNamespace caps the Topics in force in one namespace
	// (-max-topics-per-namespace; see desired.WithinLimit): zero takes
	// desired.DefaultMaxTopicsPerNamespace, negative admits every Topic.
	MaxTopicsPerNamespace int
	// OnSynced, if set, is called once every sidecar pod has been computed
	// since this replica became the leader: until then a sink that serves
	// sidecars must not answer them (it would answer with removals).
	OnSynced func()
	// Tracker, if set, holds the sidecars' acknowledgements, and
	// propagation writes them into status.
	Tracker *xds.Tracker
	// Served, if set, tells when a resource's current version was served
	// (see PropagationReconciler.Served).
	Served func(resource string) (time.Time, bool)
	// PropagationWriteInterval is the least time between two propagation
	// writes of one object (DefaultPropagationWriteInterval when zero).
	PropagationWriteInterval time.Duration
	// PropagationBatch is how long propagation gathers changes of one
	// object before reading them (DefaultPropagationBatch when zero).
	PropagationBatch time.Duration
	// Reports, if set, holds the sidecars' reports, and the report status
	// writer puts them into status.
	Reports *reports.Store
	// ReportWriteInterval is the least time between two report writes of
	// one object (DefaultReportWriteInterval when zero).
	ReportWriteInterval time.Duration
	// ReportPods is how many pods a Subscription's status.pods lists
	// (DefaultReportPods when zero).
	ReportPods int
	// MinSidecarVersion is the oldest sidecar the operator supports
	// (MinSidecarVersion when empty): older ones are reported like pods
	// without the sidecar.
	MinSidecarVersion string
	// NotInjected are the namespaces the webhook never injects
	// (webhook.ExcludedNamespaces): their pods are never reported.
	NotInjected []string
}

// SetupReconcilers registers every reconciler of the operator with mgr.
func SetupReconcilers(mgr ctrl.Manager, setup Setup) error {
	if err := indexTopicsBySubject(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing topics by subject: %w", err)
	}
	if err := indexImports(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return fmt.Errorf("indexing subscriptions and topics by import: %w", err)
	}
	maxTopics := setup.MaxTopicsPerNamespace
	if maxTopics == 0 {
		maxTopics = desired.DefaultMaxTopicsPerNamespace
	}
	events := mgr.GetEventRecorder(v1alpha1.FieldManagerReconciler)
	if err := (&TopicReconciler{Client: mgr.GetClient(), Recorder: events, MaxTopics: maxTopics}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the topic reconciler: %w", err)
	}
	if err := (&SubscriptionReconciler{Client: mgr.GetClient(), Recorder: events}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the subscription reconciler: %w", err)
	}
	pods := &PodConfigReconciler{Client: mgr.GetClient(), Store: setup.Sink, Defaults: setup.Defaults, AccessMode: setup.AccessMode, MaxTopics: maxTopics}
	if err := pods.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pod configuration reconciler: %w", err)
	}
	if setup.Tracker != nil {
		propagation := &PropagationReconciler{Client: mgr.GetClient(), Tracker: setup.Tracker, Recorder: mgr.GetEventRecorder(v1alpha1.FieldManagerPropagation),
			Served: setup.Served, WriteInterval: setup.PropagationWriteInterval, Batch: setup.PropagationBatch}
		if err := propagation.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the propagation reconciler: %w", err)
		}
	}
	if setup.Reports != nil {
		writer := &ReportStatusReconciler{Client: mgr.GetClient(), Reports: setup.Reports, WriteInterval: setup.ReportWriteInterval, Pods: setup.ReportPods}
		if err := writer.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the report status writer: %w", err)
		}
	}
	injection := &InjectionStatusReconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(v1alpha1.FieldManagerInjection), MinVersion: setup.MinSidecarVersion, Excluded: setup.NotInjected}
	if err := injection.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the injection status: %w", err)
	}
	if setup.OnSynced != nil {
		sync := &initialSync{reader: mgr.GetCache(), reconciler: pods, done: setup.OnSynced, log: mgr.GetLogger().WithName("initial-sync")}
		if err := mgr.Add(sync); err != nil {
			return fmt.Errorf("adding the initial pod sync: %w", err)
		}
	}
	return nil
}

// initialSync computes every sidecar pod once, in this process, before the
// configuration is served. It runs when this replica becomes the leader
// (a manager Runnable needs leader election unless it says otherwise).
type initialSync struct {
	reader interface {
		client.Reader
		WaitForCacheSync(context.Context) bool
	}
	reconciler *PodConfigReconciler
	done       func()
	log        logr.Logger
}

var _ manager.LeaderElectionRunnable = (*initialSync)(nil)

func (s *initialSync) NeedLeaderElection() bool { return true }

func (s *initialSync) Start(ctx context.Context) error {
	if !s.reader.WaitForCacheSync(ctx) {
		return fmt.Errorf("initial pod sync: the cache did not sync: %w", ctx.Err())
	}
	pods, err := listSidecarPods(ctx, s.reader, "")
	if err != nil {
		return fmt.Errorf("initial pod sync: %w", err)
	}
	for _, pod := range pods {
		req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}}
		if _, err := s.reconciler.Reconcile(ctx, req); err != nil {
			return fmt.Errorf("initial pod sync: %s: %w", req.NamespacedName, err)
		}
	}
	s.log.Info("every sidecar pod computed; serving configuration", "pods", len(pods))
	s.done()
	return nil
}
