// Package injectionproof proves, on the Pod object itself, that the
// operator's sidecar-injection webhook injected a pod, so that only such
// pods' sidecars are given a configuration or a broker credential,
// whatever labels and annotations a pod acquires later.
//
// A mutating webhook does not see the pod's UID (the apiserver assigns it
// after admission), so the proof cannot be kept beside the pod: it travels
// on it, as the annotation weighstation.io/injection-proof. Its value is a
// small JSON document: the claims the webhook made and an HMAC-SHA256 over
// them, under a key that only the operator holds (the Secret
// weighstation-injection-key in its namespace, Keeper). The claims are
// what the webhook injected and what makes the pod safe to trust:
//
//   - the pod's namespace (in the MAC, not the document) and
//     spec.serviceAccountName, which the projected token names;
//   - the weighstation.io/injected annotation's value;
//   - the token audience the sidecar proves the pod with;
//   - a digest of the weighstation-sidecar container as injected (image,
//     command, arguments, environment, volume mounts, securityContext,
//     restartPolicy);
//   - a digest of the volumes that hold a token for that audience and of
//     the containers that mount them (the sidecar alone, when injected).
//
// Verify recomputes them from the pod and names the first that differs.
// Most of a pod's spec cannot change after creation; what can (a
// container's image, ephemeral containers) is either in the digest or
// checked by Verify directly (Isolation). A proof copied onto another pod
// verifies only for a pod of the same namespace and service account whose
// sidecar and token layout are the same and which passes the same
// isolation checks: one that the webhook would have injected alike.
//
// The webhook signs (Sign) on Pod CREATE, and again when another webhook
// changed the pod after it (reinvocation). The chart's
// ValidatingAdmissionPolicy keeps both annotations from being added or
// changed on UPDATE; Verify is what the operator relies on, the policy
// keeps the attempt from being stored at all.
package injectionproof
