package sidecar

import (
	"github.com/weighstation/weighstation/internal/lockcount"
	"github.com/weighstation/weighstation/internal/lockrank"
)

// mutex and rwMutex are the sidecar's ranked locks (lockorder.go): exactly
// lockrank's. Under the lockcount build tag they count their acquisitions
// too, by rank (internal/lockcount), for the delivery path's diagnostic
// (TestDeliveryLockAcquisitions).
type (
	mutex[R lockrank.Ranker]   = lockcount.RankedMutex[R]
	rwMutex[R lockrank.Ranker] = lockcount.RankedRWMutex[R]
)
