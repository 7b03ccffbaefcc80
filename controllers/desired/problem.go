package desired

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Problem is a Topic or Subscription that Compute could not apply as
// written: today, a label selector that the CRD schema accepts but that is
// not a valid selector (operator "In" with no values, an unknown operator,
// an invalid label value). The schema cannot refuse every such selector, so
// the operator must not let one stop the rest of the namespace.
//
// An invalid selector selects nothing, as Kubernetes' own controllers read
// one: a Subscription with one selects no pod, and a Topic whose
// publishers selector is invalid admits no publisher (its subjects are
// refused to every pod). A mistake in a restricting selector therefore
// never widens what a pod may do, and every other resource is applied.
type Problem struct {
	// Kind is "Topic" or "Subscription".
	Kind      string
	Namespace string
	Name      string
	// Field is the path of the offending field, "spec.publishers" or
	// "spec.selector".
	Field string
	Err   error
}

// Message names the field and what is wrong with it, for the resource's
// Valid condition and Event.
func (p Problem) Message() string { return fmt.Sprintf("%s: %v", p.Field, p.Err) }

func (p Problem) Error() string {
	return fmt.Sprintf("%s %s/%s: %s", p.Kind, p.Namespace, p.Name, p.Message())
}

// TopicProblem returns what is wrong with a Topic, or nil.
func TopicProblem(t *v1alpha1.Topic) *Problem {
	_, p := publishersOf(t)
	return p
}

// SubscriptionProblem returns what is wrong with a Subscription, or nil.
func SubscriptionProblem(s *v1alpha1.Subscription) *Problem {
	_, p := subscribersOf(s)
	return p
}

// publishersOf converts a Topic's publishers selector: nil when it has
// none (every pod may publish), Nothing when it is invalid.
func publishersOf(t *v1alpha1.Topic) (labels.Selector, *Problem) {
	if t.Spec.Publishers == nil {
		return nil, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(t.Spec.Publishers)
	if err != nil {
		return labels.Nothing(), &Problem{Kind: "Topic", Namespace: t.Namespace, Name: t.Name, Field: "spec.publishers", Err: err}
	}
	return sel, nil
}

// subscribersOf converts a Subscription's selector: Nothing when it is
// invalid.
func subscribersOf(s *v1alpha1.Subscription) (labels.Selector, *Problem) {
	sel, err := metav1.LabelSelectorAsSelector(&s.Spec.Selector)
	if err != nil {
		return labels.Nothing(), &Problem{Kind: "Subscription", Namespace: s.Namespace, Name: s.Name, Field: "spec.selector", Err: err}
	}
	return sel, nil
}
