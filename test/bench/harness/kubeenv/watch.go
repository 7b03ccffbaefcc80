package kubeenv

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrRelisted is what Watch reports when the apiserver expired its watch
// and it listed the objects again: the changes in between were not seen
// one by one.
var ErrRelisted = errors.New("the watch expired and was listed again: writes in between are not counted")

// Watch watches one kind of object in namespace until ctx ends, calling
// observe with every event (in order, from one goroutine). It resumes from
// the last resourceVersion when the apiserver ends the watch, and lists
// again (observing every object as Added, then calling fail with
// ErrRelisted) if that version is gone. fail is called with every error;
// Watch retries after a second.
func Watch(ctx context.Context, c ctrlclient.WithWatch, namespace string, newList func() ctrlclient.ObjectList,
	observe func(watch.EventType, ctrlclient.Object), fail func(error)) {
	rv := ""
	for ctx.Err() == nil {
		opts := &ctrlclient.ListOptions{Namespace: namespace, Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}}
		wi, err := c.Watch(ctx, newList(), opts)
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = relist(ctx, c, namespace, newList, observe, fail)
				continue
			}
			fail(err)
			time.Sleep(time.Second)
			continue
		}
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				if st, ok := ev.Object.(*metav1.Status); ok && (st.Code == 410) {
					rv = ""
				}
				break
			}
			obj, ok := ev.Object.(ctrlclient.Object)
			if !ok {
				continue
			}
			rv = obj.GetResourceVersion()
			if ev.Type == watch.Bookmark {
				continue
			}
			observe(ev.Type, obj)
		}
		wi.Stop()
		if rv == "" {
			rv = relist(ctx, c, namespace, newList, observe, fail)
		}
	}
}

func relist(ctx context.Context, c ctrlclient.WithWatch, namespace string, newList func() ctrlclient.ObjectList,
	observe func(watch.EventType, ctrlclient.Object), fail func(error)) string {
	list := newList()
	if err := c.List(ctx, list, ctrlclient.InNamespace(namespace)); err != nil {
		fail(err)
		time.Sleep(time.Second)
		return ""
	}
	items, _ := meta.ExtractList(list)
	for _, it := range items {
		if obj, ok := it.(ctrlclient.Object); ok {
			observe(watch.Added, obj)
		}
	}
	fail(ErrRelisted)
	return list.(metav1.ListInterface).GetResourceVersion()
}
