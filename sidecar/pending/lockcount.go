package pending

import "github.com/weighstation/weighstation/internal/lockcount"

// mutex is sync's. Under the lockcount build tag it counts its
// acquisitions (internal/lockcount), all of this package's together, for
// the sidecar's delivery path diagnostic.
type mutex = lockcount.Mutex[locks]

type locks struct{}

func (locks) LockLabel() string { return "pending (queues, budgets)" }
