// Package controllers holds weighstation's reconcilers: TopicReconciler and
// SubscriptionReconciler keep their resources' status, and
// PodConfigReconciler keeps each sidecar pod's desired configuration
// (meshconfig.PodConfig) in a desired.Store, which the xDS server of a
// later issue publishes.
//
// Status is written with server-side apply on the status subresource, under
// the field manager FieldManager, and only when it changed. Conditions
// carry observedGeneration.
//
// Nothing here may let a resource of one namespace affect the pods of
// another: every list is scoped to the object's namespace.
package controllers
