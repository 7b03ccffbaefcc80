package topic

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/controllers/imports"
	"github.com/weighstation/weighstation/controllers/status"
	"github.com/weighstation/weighstation/matcher"
)

// Reasons of the Topic conditions.
const (
	ReasonInForce           = "InForce"
	ReasonShadowed          = "Shadowed"
	ReasonInvalidPublishers = "InvalidPublishers"
	ReasonSamePattern       = "SamePattern"
	ReasonNoConflict        = "NoConflict"
	ReasonOverTopicLimit    = "OverNamespaceTopicLimit"
)

// topicStatus computes what the reconciler owns of a Topic's status from its
// namespace's Topics and Subscriptions; governed counts what Topics in
// force govern.
//
// importIssue is why its service import imports nothing
// (imports.TopicProblem), or "".
//
// maxTopics caps the Topics in force in the namespace (desired.WithinLimit):
// a Topic past it is Valid=False and in force nowhere.
func topicStatus(topic *v1alpha1.Topic, topics []v1alpha1.Topic, maxTopics int, subscriptions []v1alpha1.Subscription, governed *governedCounts, importIssue string) v1alpha1.TopicStatus {
	next := *topic.Status.DeepCopy()
	next.ObservedGeneration = topic.Generation
	gen := topic.Generation

	all := len(topics)
	topics, over := desired.WithinLimit(topics, maxTopics)
	if over[topic.Name] {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionConflicting, metav1.ConditionFalse, ReasonNoConflict, "the Topic is not in force (see Valid)")
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, ReasonOverTopicLimit,
			fmt.Sprintf("namespace %s has %d Topics: the operator's -max-topics-per-namespace (%d) admits the %d created first, so this Topic is in force nowhere until others are deleted", topic.Namespace, all, maxTopics, maxTopics))
		next.Subscriptions = 0
		return next
	}

	inForce, conflicts := desired.ResolveConflicts(topics)
	if others := conflicts[topic.Name]; len(others) > 0 {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionConflicting, metav1.ConditionTrue, ReasonSamePattern,
			fmt.Sprintf("Topic(s) %s have the same subject pattern %q; the one whose name sorts first is in force", strings.Join(others, ", "), topic.Spec.Subject))
	} else {
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionConflicting, metav1.ConditionFalse, ReasonNoConflict, "no other Topic of the namespace has this subject pattern")
	}

	problem := desired.TopicProblem(topic)
	var inForceInstead *v1alpha1.Topic
	for i := range inForce {
		if inForce[i].Spec.Subject == topic.Spec.Subject {
			inForceInstead = &inForce[i]
		}
	}
	// (The list comes from the cache the Topic was read from, so it holds
	// the Topic; a Topic missing from it counts as in force.)
	isInForce := inForceInstead == nil || inForceInstead.Name == topic.Name
	switch {
	case problem != nil:
		// An invalid selector selects nothing: where the Topic is in force,
		// it stands for its subjects as a refusal (desired.Problem).
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, ReasonInvalidPublishers,
			problem.Message()+"; the Topic admits no publisher until it is fixed")
	case !isInForce:
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, ReasonShadowed,
			fmt.Sprintf("Topic %s has the same subject pattern and is in force", inForceInstead.Name))
	case importIssue != "":
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionFalse, imports.ReasonNotExported, importIssue)
	default:
		status.SetCondition(&next.Conditions, gen, v1alpha1.ConditionValid, metav1.ConditionTrue, ReasonInForce,
			fmt.Sprintf("governs the subjects matching %q that no more specific Topic matches", topic.Spec.Subject))
	}

	next.Subscriptions = 0
	if isInForce {
		next.Subscriptions = governed.count(topic.Namespace, topic.Name, inForce, subscriptions)
	}
	return next
}

// governingTopic returns the most specific Topic whose pattern covers the
// whole of pattern, or nil.
func governingTopic(topics []v1alpha1.Topic, pattern string) *v1alpha1.Topic {
	var best *v1alpha1.Topic
	for i := range topics {
		t := &topics[i]
		if !matcher.Covers(string(t.Spec.Subject), pattern) {
			continue
		}
		if best == nil || matcher.CompareSpecificity(string(t.Spec.Subject), string(best.Spec.Subject)) > 0 {
			best = t
		}
	}
	return best
}
