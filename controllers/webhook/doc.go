// Package webhook is the operator's sidecar-injection webhook: a mutating
// admission webhook on Pod CREATE (sidecar-injector.weighstation.io) that
// adds weighstation-sidecar to the pods that opt in, as a native sidecar.
//
// inject.go is the mutation itself (no server), overrides.go the
// per-pod resource annotations and their bounds, handler.go the admission
// decision (opt-in, excluded namespaces), server.go the TLS server, and
// cabundle.go keeps the MutatingWebhookConfiguration's caBundle on the
// operator's CA.
package webhook
