//go:build !lockcount

package upstream

import "sync"

// mutex and rwMutex are sync's. Under the lockcount build tag they count
// their acquisitions (lockcount_on.go), for the sidecar's delivery path
// diagnostic.
type (
	mutex   = sync.Mutex
	rwMutex = sync.RWMutex
)
