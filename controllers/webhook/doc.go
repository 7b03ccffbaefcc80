// Package webhook is the operator's sidecar-injection webhook: a mutating
// admission webhook on Pod CREATE (sidecar-injector.weighstation.io, two
// entries: by namespace label and by pod label) that adds
// weighstation-sidecar to the pods that opt in, as a native sidecar
// running as a UID of its own, refuses pods that would not keep it apart
// from their other containers, and signs each pod it injects
// (controllers/injectionproof).
//
// inject.go is the mutation itself (no server), overrides.go the
// per-pod resource annotations and their bounds, handler.go the admission
// decision (opt-in, excluded namespaces, ephemeral containers, the proof),
// server.go the TLS server, and cabundle.go keeps the
// MutatingWebhookConfiguration's caBundle on the operator's CA.
package webhook
