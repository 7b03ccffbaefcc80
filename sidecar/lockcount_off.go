//go:build !lockcount

package sidecar

import "github.com/weighstation/weighstation/internal/lockrank"

// mutex and rwMutex are the sidecar's ranked locks (lockorder.go): exactly
// lockrank's. Under the lockcount build tag they count their acquisitions
// too (lockcount_on.go), for the delivery path's diagnostic
// (TestDeliveryLockAcquisitions).
type (
	mutex[R lockrank.Ranker]   = lockrank.Mutex[R]
	rwMutex[R lockrank.Ranker] = lockrank.RWMutex[R]
)
