//go:build lockcount

package sidecar

// LockCounts is the sidecar's lock acquisitions so far, by lock.
var LockCounts = lockCounts
