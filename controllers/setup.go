package controllers

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/index"
	"github.com/weighstation/weighstation/controllers/injectionstatus"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/podconfig"
	"github.com/weighstation/weighstation/controllers/propagation"
	"github.com/weighstation/weighstation/controllers/reports"
	"github.com/weighstation/weighstation/controllers/reportstatus"
	"github.com/weighstation/weighstation/controllers/sidecarpods"
	"github.com/weighstation/weighstation/controllers/subscription"
	"github.com/weighstation/weighstation/controllers/topic"
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
	// (see propagation.Reconciler.Served).
	Served func(resource string) (time.Time, bool)
	// PropagationWriteInterval is the least time between two propagation
	// writes of one object (propagation.DefaultWriteInterval when zero).
	PropagationWriteInterval time.Duration
	// PropagationBatch is how long propagation gathers changes of one
	// object before reading them (propagation.DefaultBatch when zero).
	PropagationBatch time.Duration
	// Reports, if set, holds the sidecars' reports, and the report status
	// writer puts them into status.
	Reports *reports.Store
	// ReportWriteInterval is the least time between two report writes of
	// one object (reportstatus.DefaultWriteInterval when zero).
	ReportWriteInterval time.Duration
	// ReportPods is how many pods a Subscription's status.pods lists
	// (reportstatus.DefaultPods when zero).
	ReportPods int
	// MinSidecarVersion is the oldest sidecar the operator supports
	// (injectionstatus.MinSidecarVersion when empty): older ones are
	// reported like pods without the sidecar.
	MinSidecarVersion string
	// NotInjected are the namespaces the webhook never injects
	// (webhook.ExcludedNamespaces): their pods are never reported.
	NotInjected []string
}

// SetupReconcilers registers every reconciler of the operator with mgr:
// each package's SetupWithManager, and the indexes they list by.
func SetupReconcilers(mgr ctrl.Manager, setup Setup) error {
	if err := index.Register(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	maxTopics := setup.MaxTopicsPerNamespace
	if maxTopics == 0 {
		maxTopics = desired.DefaultMaxTopicsPerNamespace
	}
	events := mgr.GetEventRecorder(v1alpha1.FieldManagerReconciler)
	if err := (&topic.Reconciler{Client: mgr.GetClient(), Recorder: events, MaxTopics: maxTopics}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the topic reconciler: %w", err)
	}
	if err := (&subscription.Reconciler{Client: mgr.GetClient(), Recorder: events}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the subscription reconciler: %w", err)
	}
	pods := &podconfig.Reconciler{Client: mgr.GetClient(), Store: setup.Sink, Defaults: setup.Defaults, AccessMode: setup.AccessMode, MaxTopics: maxTopics}
	if err := pods.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pod configuration reconciler: %w", err)
	}
	if setup.Tracker != nil {
		writer := &propagation.Reconciler{Client: mgr.GetClient(), Tracker: setup.Tracker, Recorder: mgr.GetEventRecorder(v1alpha1.FieldManagerPropagation),
			Served: setup.Served, WriteInterval: setup.PropagationWriteInterval, Batch: setup.PropagationBatch}
		if err := writer.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the propagation reconciler: %w", err)
		}
	}
	if setup.Reports != nil {
		writer := &reportstatus.Reconciler{Client: mgr.GetClient(), Reports: setup.Reports, WriteInterval: setup.ReportWriteInterval, Pods: setup.ReportPods}
		if err := writer.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("setting up the report status writer: %w", err)
		}
	}
	injection := &injectionstatus.Reconciler{Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder(v1alpha1.FieldManagerInjection), MinVersion: setup.MinSidecarVersion, Excluded: setup.NotInjected}
	if err := injection.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the injection status: %w", err)
	}
	if setup.OnSynced != nil {
		if err := mgr.Add(pods.InitialSync(mgr.GetCache(), setup.OnSynced, mgr.GetLogger().WithName("initial-sync"))); err != nil {
			return fmt.Errorf("adding the initial pod sync: %w", err)
		}
	}
	return nil
}

// CacheOptions limits the manager's pod cache to the metadata of sidecar
// pods that count: the operator needs only their labels, annotations and
// UID, never the others, and a cluster has many large pods. Of ConfigMaps
// it holds only the CA bundles it publishes (its RBAC allows no others).
func CacheOptions() cache.Options {
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		sidecarpods.Meta():  sidecarpods.CacheByObject(),
		&corev1.ConfigMap{}: pki.BundleConfigMap{}.CacheByObject(),
	}}
}
