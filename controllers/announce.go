package controllers

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

// What the reconcilers announce with Events.
const (
	announceInvalid  = "invalid"  // an invalid selector, once per generation
	announceConflict = "conflict" // a change of the Topics one conflicts with
)

// Events of the reconcilers (reasons and actions).
const (
	// EventReasonInvalidSelector: a Topic's publishers or a Subscription's
	// selector is invalid; it selects nothing.
	EventReasonInvalidSelector = "InvalidSelector"
	// EventReasonConflicting: a Topic shares its subject pattern with other
	// Topics of its namespace.
	EventReasonConflicting = "Conflicting"
	eventActionConfigure   = "Configure"
)

// announcements remembers what each object's last Event announced. The
// reconcilers run many times per change (every requeue, every status
// write), so an Event is recorded when what it says is news, not on every
// reconcile. Safe for concurrent use.
type announcements struct {
	mu   sync.Mutex
	last map[announcementKey]announced
}

type announcementKey struct {
	object types.NamespacedName
	what   string // announceInvalid or announceConflict
}

type announced struct {
	uid   types.UID // a re-created object is news again
	state string
}

// news reports whether state is news about obj, and remembers it. The
// empty state (no problem) is never news, but makes the next problem news
// again. The first time an object is seen, what its status already shows
// counts as announced, so that a restart or a new leader does not repeat
// the Events of the problems its predecessor announced.
func (a *announcements) news(obj client.Object, what, state, shown string) bool {
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

// forget drops what was announced of an object that is gone.
func (a *announcements) forget(name types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, what := range []string{announceInvalid, announceConflict} {
		delete(a.last, announcementKey{object: name, what: what})
	}
}

// getFailed handles a reconciler's failed Get of name: a NotFound object
// is gone (forget it; nothing to reconcile), any other error is returned.
func (a *announcements) getFailed(name types.NamespacedName, err error) error {
	if apierrors.IsNotFound(err) {
		a.forget(name)
		return nil
	}
	return err
}

// invalidState is what the Valid condition says of an invalid selector,
// with the generation it was judged at ("" when the selector is valid): an
// invalid selector is announced once per generation.
func invalidState(conditions []metav1.Condition) string {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionValid)
	if c == nil || c.Status != metav1.ConditionFalse || (c.Reason != ReasonInvalidPublishers && c.Reason != ReasonInvalidSelector) {
		return ""
	}
	return fmt.Sprintf("%s (generation %d)", c.Message, c.ObservedGeneration)
}

// conflictState is what the Conflicting condition says, naming the other
// Topics ("" when there is no conflict): a conflict is announced once per
// change of the Topics it involves.
func conflictState(conditions []metav1.Condition) string {
	c := meta.FindStatusCondition(conditions, v1alpha1.ConditionConflicting)
	if c == nil || c.Status != metav1.ConditionTrue {
		return ""
	}
	return c.Message
}
