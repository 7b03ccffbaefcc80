// Package lockcount counts lock acquisitions, for the sidecar's delivery
// path diagnostic (sidecar's TestDeliveryLockAcquisitions):
//
//	go test -tags lockcount -run TestDeliveryLockAcquisitions -v ./sidecar/
//
// Its locks are counted under the lockcount build tag only: without it,
// Mutex and RWMutex are sync's, and RankedMutex and RankedRWMutex are
// lockrank's, so the locks cost nothing more. Under the tag, every Lock,
// RLock and TryLock (whatever it returns) adds one to the count of the
// lock's label, a type parameter like lockrank's rank: a zero-size type
// whose LockLabel method names the locks counted together.
//
//	type queueLocks struct{}
//
//	func (queueLocks) LockLabel() string { return "pending (queues, budgets)" }
//
//	type mutex = lockcount.Mutex[queueLocks]
//
// A ranked lock is counted under its rank's name.
package lockcount

import "github.com/weighstation/weighstation/internal/lockrank"

// Label is the type parameter of Mutex and RWMutex: a comparable
// zero-size type whose LockLabel method names the count its locks add to.
type Label interface {
	comparable
	LockLabel() string
}

// rankLabel counts a ranked lock under its rank's name.
type rankLabel[R lockrank.Ranker] struct{}

func (rankLabel[R]) LockLabel() string {
	var r R
	return r.Rank().String()
}
