//go:build !lockcount

package pending

import "sync"

// mutex is sync's. Under the lockcount build tag it counts its
// acquisitions (lockcount_on.go), for the sidecar's delivery path
// diagnostic.
type mutex = sync.Mutex
