// Package announce decides when a reconciler's Warning Event is news: the
// reconcilers run many times per change, and an Event is recorded once per
// problem, not once per reconcile.
package announce

import (
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// What is what the reconcilers announce with Events.
type What string

const (
	Invalid  What = "invalid"  // an invalid selector, once per generation
	Conflict What = "conflict" // a change of the Topics one conflicts with
)

// Events of the reconcilers (reasons and actions).
const (
	// EventReasonInvalidSelector: a Topic's publishers or a Subscription's
	// selector is invalid; it selects nothing.
	EventReasonInvalidSelector = "InvalidSelector"
	// EventReasonConflicting: a Topic shares its subject pattern with other
	// Topics of its namespace.
	EventReasonConflicting = "Conflicting"
	EventActionConfigure   = "Configure"
)

// Memory remembers what each object's last Event announced. The
// reconcilers run many times per change (every requeue, every status
// write), so an Event is recorded when what it says is news, not on every
// reconcile. Safe for concurrent use.
type Memory struct {
	mu   sync.Mutex
	last map[announcementKey]announced
}

type announcementKey struct {
	object types.NamespacedName
	what   What
}

type announced struct {
	uid   types.UID // a re-created object is news again
	state string
}

// News reports whether state is news about obj, and remembers it. The
// empty state (no problem) is never news, but makes the next problem news
// again. The first time an object is seen, what its status already shows
// counts as announced, so that a restart or a new leader does not repeat
// the Events of the problems its predecessor announced.
func (a *Memory) News(obj client.Object, what What, state, shown string) bool {
	key := announcementKey{object: client.ObjectKeyFromObject(obj), what: what}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.last == nil {
		a.last = map[announcementKey]announced{}
	}
	prev, ok := a.last[key]
	if !ok || prev.uid != obj.GetUID() {
		prev = announced{uid: obj.GetUID(), state: shown}
	}
	a.last[key] = announced{uid: obj.GetUID(), state: state}
	return state != "" && state != prev.state
}

// Forget drops what was announced of an object that is gone.
func (a *Memory) Forget(name types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, what := range []What{Invalid, Conflict} {
		delete(a.last, announcementKey{object: name, what: what})
	}
}

// GetFailed handles a reconciler's failed Get of name: a NotFound object
// is gone (forget it; nothing to reconcile), any other error is returned.
func (a *Memory) GetFailed(name types.NamespacedName, err error) error {
	if apierrors.IsNotFound(err) {
		a.Forget(name)
		return nil
	}
	return err
}

// InvalidState is what the Valid condition says of an invalid selector
// (reason: the kind's Valid=False reason for one), with the generation it
// was judged at ("" when the selector is valid): an invalid selector is
// announced once per generation.
func InvalidState(conditions []metav1.Condition, reason string) string {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionValid)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != reason {
		return ""
	}
	return fmt.Sprintf("%s (generation %d)", c.Message, c.ObservedGeneration)
}

// ConflictState is what the Conflicting condition says, naming the other
// Topics ("" when there is no conflict): a conflict is announced once per
// change of the Topics it involves.
func ConflictState(conditions []metav1.Condition) string {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionConflicting)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Message
}
