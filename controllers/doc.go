// Package controllers registers weighstation's reconcilers with a manager
// (SetupReconcilers) and sets up the manager's cache (CacheOptions). Each
// reconciler is a package of its own:
//
//	topic            a Topic's validity, conflicts and governed Subscriptions
//	subscription     a Subscription's validity and hand-set kill switch
//	podconfig        each sidecar pod's desired configuration (desired.Sink)
//	propagation      how far each policy reached the sidecars (status.config)
//	reportstatus     what the sidecars reported (latency, drops, publish counts)
//	injectionstatus  pods without a supported sidecar (PodsWithoutSidecar)
//
// and beside them run leaderlabel (the leader's Pod label) and cabundle
// (the CA bundle in every sidecar namespace). What they share:
//
//	status       who owns which status fields, and the writes of each owner
//	announce     when a Warning Event is news
//	index        the cache's field indexes
//	imports      cross-namespace imports and their importers
//	sidecarpods  the cache of sidecar pod metadata
//	enqueue      event handlers: what a change requeues, and when
//	request      a request that says whether it names a Topic or a Subscription
//
// Nothing here may let a resource of one namespace affect the pods of
// another: every list is scoped to the object's namespace.
package controllers
