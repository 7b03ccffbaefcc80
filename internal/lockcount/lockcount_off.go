//go:build !lockcount

package lockcount

import (
	"sync"

	"github.com/weighstation/weighstation/internal/lockrank"
)

// Enabled reports whether acquisitions are counted: under the lockcount
// build tag only.
const Enabled = false

// Without the lockcount build tag the locks are sync's and lockrank's.
type (
	Mutex[L Label]                   = sync.Mutex
	RWMutex[L Label]                 = sync.RWMutex
	RankedMutex[R lockrank.Ranker]   = lockrank.Mutex[R]
	RankedRWMutex[R lockrank.Ranker] = lockrank.RWMutex[R]
)

// Counts returns the acquisitions counted so far: none, uncounted.
func Counts() map[string]uint64 { return nil }
