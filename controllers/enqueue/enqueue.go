// Package enqueue holds the event handlers the reconcilers share: what a
// change requeues, and when.
package enqueue

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Func queues the requests for the objects of one event.
type Func[T any, R comparable] func(ctx context.Context, q workqueue.TypedRateLimitingInterface[R], objs ...T)

// Objects is an event handler that gives enqueue the object of each
// event, and on an update both the old and the new one (a change can
// affect what the old one selected as well as what the new one does).
func Objects[T any, R comparable](enqueue Func[T, R]) handler.TypedEventHandler[T, R] {
	return handler.TypedFuncs[T, R]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[T], q workqueue.TypedRateLimitingInterface[R]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[T], q workqueue.TypedRateLimitingInterface[R]) {
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[T], q workqueue.TypedRateLimitingInterface[R]) {
			enqueue(ctx, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.TypedGenericEvent[T], q workqueue.TypedRateLimitingInterface[R]) {
			enqueue(ctx, q, e.Object)
		},
	}
}

// After is handler.TypedEnqueueRequestsFromMapFunc that queues each
// request after delay: the workqueue keeps one pending entry per request,
// at its earliest time, so what changes within delay of the first change
// is read by one reconcile.
func After[T any, R comparable](delay time.Duration, mapFn handler.TypedMapFunc[T, R]) handler.TypedEventHandler[T, R] {
	return Objects(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[R], objs ...T) {
		for _, obj := range objs {
			for _, req := range mapFn(ctx, obj) {
				q.AddAfter(req, delay)
			}
		}
	})
}

// Feeder is a manager's runnable that, whenever wake signals, sends each
// request that take returns to out, as a generic event of the request
// itself, until the manager stops. Callers that must never wait on a
// controller (stream goroutines, store callbacks) gather requests in a set
// and signal wake; this one goroutine waits for the controller instead.
func Feeder[R comparable](wake <-chan struct{}, take func() map[R]bool, out chan<- event.TypedGenericEvent[R]) manager.Runnable {
	return manager.RunnableFunc(func(ctx context.Context) error {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			}
			for req := range take() {
				select {
				case out <- event.TypedGenericEvent[R]{Object: req}:
				case <-ctx.Done():
					return nil
				}
			}
		}
	})
}

// Set gathers requests from callers that must never wait, for its Feeder
// to feed to a controller. Safe for concurrent use.
type Set[R comparable] struct {
	mu   sync.Mutex
	reqs map[R]bool
	wake chan struct{}
}

// NewSet returns an empty Set.
func NewSet[R comparable]() *Set[R] {
	return &Set[R]{reqs: map[R]bool{}, wake: make(chan struct{}, 1)}
}

// Add gathers req.
func (s *Set[R]) Add(req R) {
	s.mu.Lock()
	s.reqs[req] = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// take returns the requests gathered so far, and forgets them.
func (s *Set[R]) take() map[R]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.reqs
	s.reqs = map[R]bool{}
	return reqs
}

// Feeder feeds the gathered requests to out (see Feeder).
func (s *Set[R]) Feeder(out chan<- event.TypedGenericEvent[R]) manager.Runnable {
	return Feeder(s.wake, s.take, out)
}
