package controllers

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig"
)

// SetupReconcilers registers every reconciler of the operator with mgr;
// configurations go to store.
func SetupReconcilers(mgr ctrl.Manager, store *desired.Store, defaults meshconfig.Defaults) error {
	if err := (&TopicReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the topic reconciler: %w", err)
	}
	if err := (&SubscriptionReconciler{Client: mgr.GetClient()}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the subscription reconciler: %w", err)
	}
	if err := (&PodConfigReconciler{Client: mgr.GetClient(), Store: store, Defaults: defaults}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("setting up the pod configuration reconciler: %w", err)
	}
	return nil
}
