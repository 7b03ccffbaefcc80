// Package brokercreds gives each sidecar its own broker credential, which
// the application in its pod never sees, bounded by what its pod may do,
// and takes it back when the pod is deleted or leaves the mesh.
//
// It uses nats-server's decentralised JWT authentication. The operator
// holds an operator key, which the brokers trust, a system account,
// through which it pushes accounts to the brokers, and a secret from which
// it derives every namespace's account key and every pod's user key, in a
// Secret of its own namespace (Keys). The brokers learn the operator's and
// the system account's public JWTs from a ConfigMap (Trust), never a
// private key.
//
// Accounts. Each namespace is an account (AccountJWT): subjects of one are
// invisible to another, but for what a Topic or Subscription exports and
// another namespace's Subscription or Topic imports (Sharing). The Keeper
// pushes a namespace's account to the brokers before it issues the
// namespace's first credential, again whenever its revocations or sharing
// change, and every PushInterval; and it answers a broker's lookup of an
// account it lacks (Pusher). The brokers keep what they learned in
// nats-server's full resolver.
//
// Issue. A sidecar proves which pod it is on its xDS connection (the
// TokenReview of its projected ServiceAccount token, and the injection
// proof), and asks for its credential there (Service): a user JWT signed
// by its namespace's account, for a user nkey derived from the pod's UID,
// with the nkey's seed. The JWT allows an upper bound of the pod's policy
// (meshconfig.BrokerBoundOf, from the configuration the pod reconciler
// computed: Bounds), one reply per request received, a payload and a
// subscription limit, and it expires (Limits.Lifetime). The sidecar holds
// it in memory only and renews it before it expires.
//
// Revocation. When a pod is deleted (the Pod object is gone, not merely
// terminating: the sidecar drains until then) or leaves the mesh (its
// label removed), and when a new sidecar process of a pod asks (the one
// it replaced), the Keeper revokes the pod's user key in its namespace's
// account, writes the revocation lists into the ConfigMap (so that a new
// leader keeps them) and pushes the account; nats-server then closes the
// pod's connections and refuses the credential. Deriving user keys from
// UIDs makes revocation need no record of what was issued.
//
// Bounds. A revocation is kept for the credential lifetime (plus a
// minute): by then whatever it refuses has expired. The lists hold at most
// Limits.MaxEntries entries; past it a namespace's oldest are folded into
// one revocation of every older credential of the namespace (jwt.All), so
// that no revoked credential comes back while it is valid.
package brokercreds
