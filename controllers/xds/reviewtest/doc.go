// Package reviewtest checks the xDS server's TokenGate against a real
// kube-apiserver (envtest): real pod-bound tokens, real TokenReviews,
// counted as the apiserver receives them. It holds tests only; the rest of
// package xds's tests need no apiserver.
package reviewtest
