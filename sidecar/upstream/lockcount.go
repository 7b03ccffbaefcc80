package upstream

import "github.com/weighstation/weighstation/internal/lockcount"

// mutex and rwMutex are sync's. Under the lockcount build tag they count
// their acquisitions (internal/lockcount), all of this package's together,
// for the sidecar's delivery path diagnostic.
type (
	mutex   = lockcount.Mutex[locks]
	rwMutex = lockcount.RWMutex[locks]
)

type locks struct{}

func (locks) LockLabel() string { return "upstream (dispatch, subsMu, mu)" }
