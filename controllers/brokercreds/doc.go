// Package brokercreds gives each sidecar its own broker credential, which
// the application in its pod never sees, and takes it back when the pod is
// deleted.
//
// It uses nats-server's decentralised JWT authentication. The operator
// holds three nkeys in a Secret of its own namespace (Keys): an operator
// key, which the brokers trust; a system account, through which it pushes
// account updates to the brokers; and the account every sidecar belongs
// to. The brokers learn the three public JWTs from a ConfigMap (Trust),
// never a private key.
//
// A sidecar proves which pod it is on its xDS connection (the TokenReview
// of its projected ServiceAccount token), and asks for its credential
// there (Service): a user JWT signed by the account key, for a user nkey
// derived from the pod's UID, with the nkey's seed. The sidecar holds both
// in memory only; no file, no Secret, no environment variable carries
// them, so another container of the pod has nothing to read.
//
// Lifetime and revocation. The credential has no expiry: it lives as long
// as the pod, because nats-server closes a connection whose JWT expires
// and a sidecar would lose what was in flight. When the pod is deleted
// (the Pod object is gone, not merely terminating: the sidecar drains
// until then), Revoker puts the pod's user key on the account's revocation
// list, writes the account JWT into the ConfigMap (which a restarting
// broker reads) and pushes it to the running brokers over the system
// account; nats-server then closes the pod's connections and refuses the
// credential, and any issued for the pod up to RevocationMargin after the
// deletion (a request that raced it). Deriving the user key from the UID makes revocation
// stateless: an operator that restarts can still revoke a pod whose
// credential an earlier replica issued.
//
// The revocation list is bounded (Limits): an entry is kept for a
// retention period and the list holds at most a number of entries, oldest
// dropped first, so that the account JWT stays well under the ConfigMap's
// 1 MiB and the broker's max_payload. An entry dropped from the list
// matters only to someone who copied a deleted pod's seed out of its
// sidecar's memory while it ran.
package brokercreds
