// Package request is the request of a reconciler that serves Topics and
// Subscriptions in one queue: names are unique per kind only, so each
// request says which kind it names, and the reconciler reads one object.
package request

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/weighstation/weighstation/api/v1alpha1"
)

// Kind is the kind of object a request names.
type Kind string

const (
	Topic        Kind = "topic"
	Subscription Kind = "subscription"
)

// Object names one Topic or one Subscription.
type Object struct {
	Kind Kind
	types.NamespacedName
}

// For names obj, a Topic or a Subscription (false for any other object).
func For(obj client.Object) (Object, bool) {
	nn := client.ObjectKeyFromObject(obj)
	switch obj.(type) {
	case *v1alpha1.Topic:
		return Object{Kind: Topic, NamespacedName: nn}, true
	case *v1alpha1.Subscription:
		return Object{Kind: Subscription, NamespacedName: nn}, true
	}
	return Object{}, false
}

// Self maps a Topic or a Subscription to its own request (a
// handler.TypedMapFunc).
func Self(_ context.Context, obj client.Object) []Object {
	if req, ok := For(obj); ok {
		return []Object{req}
	}
	return nil
}

// LogConstructor is a controller's logger for these requests
// (builder.TypedBuilder.WithLogConstructor): controller-runtime names only
// a reconcile.Request's object by itself.
func LogConstructor(log logr.Logger) func(*Object) logr.Logger {
	return func(req *Object) logr.Logger {
		if req == nil {
			return log
		}
		return log.WithValues("kind", string(req.Kind), "namespace", req.Namespace, "name", req.Name)
	}
}

// String names the kind too: NamespacedName's String, which Object
// embeds, would not.
func (o Object) String() string { return string(o.Kind) + " " + o.NamespacedName.String() }

// Dispatch reads the object req names, with one Get, and passes it to the
// function of its kind, whose duration is when to come back (0: only on a
// change). An object that is gone is passed to gone instead.
func Dispatch(ctx context.Context, c client.Reader, req Object,
	onSubscription func(*v1alpha1.Subscription) (time.Duration, error),
	onTopic func(*v1alpha1.Topic) (time.Duration, error),
	gone func(Object),
) (reconcile.Result, error) {
	var after time.Duration
	var err error
	switch req.Kind {
	case Subscription:
		var sub v1alpha1.Subscription
		if err = c.Get(ctx, req.NamespacedName, &sub); err == nil {
			after, err = onSubscription(&sub)
		}
	case Topic:
		var topic v1alpha1.Topic
		if err = c.Get(ctx, req.NamespacedName, &topic); err == nil {
			after, err = onTopic(&topic)
		}
	default:
		return reconcile.Result{}, fmt.Errorf("a request for a %q, neither a Topic nor a Subscription", req.Kind)
	}
	if apierrors.IsNotFound(err) {
		gone(req)
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: after}, nil
}
