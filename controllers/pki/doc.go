// Package pki is the operator's own certificate authority. It serves the
// xDS gRPC stream over TLS, and issues the brokers' route certificate
// (RouteCertificate; later, the admission webhook's too).
//
// An Authority keeps the CA in a Secret in the operator's namespace. It
// reads that Secret through the API server, not the manager's cache: a
// cached Get would start an informer on every Secret the operator can see.
// Replicas share the Secret. A create that loses a race, or an update that
// conflicts, makes the loser read the Secret again and adopt what the
// winner wrote. So every replica trusts the same CAs.
//
// The CA is rotated once a fraction of its lifetime has passed. The new CA
// joins the bundle, and the old one stays there until it expires. Each
// replica's serving (leaf) certificate lives only in memory and never
// outlives the CA that signed it. The leaf moves to the new CA only after
// SigningDelay, so that the bundle holding the new CA has time to reach
// the sidecars first. GetCertificate always hands out the current leaf, so
// a running server picks up a new certificate at its next handshake.
//
// PublishBundle copies the bundle into a ConfigMap in each namespace the
// caller names. Sidecars mount it and read it again with
// internal/tlsreload, which imports nothing from Kubernetes.
//
// This package must never write a private key anywhere except the CA
// Secret, and must never put a key into the bundle.
package pki
