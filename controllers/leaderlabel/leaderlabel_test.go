package leaderlabel_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/weighstation/weighstation/controllers/leaderlabel"
	"github.com/weighstation/weighstation/internal/envtestsuite"
)

// labelTestWait bounds every wait of these tests.
const labelTestWait = 10 * time.Second

// The merge patches the labeler sends to put the label on and take it off.
var (
	labelOnPatch  = fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, leaderlabel.Label)
	labelOffPatch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, leaderlabel.Label)
)

// labelTest is one operator replica's Labeler, labelling a real Pod
// in the apiserver (envtest has no kubelet: the Pod object is enough).
type labelTest struct {
	l   *leaderlabel.Labeler
	pod types.NamespacedName
	// patches counts the PATCHes the labeler sent.
	patches atomic.Int32
}

// newLabelTest creates, in a namespace of the test's own, the operator's
// Pod as a former leader left it (labelled), and a Labeler whose
// client is the suite's apiserver behind funcs, which may hold a PATCH
// (the apiserver still answers what they pass on).
func newLabelTest(t *testing.T, stopTimeout time.Duration, funcs interceptor.Funcs) *labelTest {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: envtestsuite.NewNamespace(t, k8sClient, "test-"), Name: "operator-0",
			Labels: map[string]string{leaderlabel.Label: "true", "app": "operator"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "weighstation"}}},
	}
	if err := k8sClient.Create(ctx, pod); err != nil {
		t.Fatalf("creating the operator's pod: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	lt := &labelTest{pod: client.ObjectKeyFromObject(pod)}
	inner := funcs.Patch
	funcs.Patch = func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		lt.patches.Add(1)
		if inner != nil {
			return inner(ctx, c, obj, patch, opts...)
		}
		return c.Patch(ctx, obj, patch, opts...)
	}
	lt.l = &leaderlabel.Labeler{
		Client: interceptor.NewClient(direct, funcs), Pod: lt.pod, Log: testr.New(t), StopTimeout: stopTimeout,
	}
	return lt
}

// labels reads the operator's pod's labels from the apiserver.
func (lt *labelTest) labels(t *testing.T) map[string]string {
	t.Helper()
	var p corev1.Pod
	if err := k8sClient.Get(context.Background(), lt.pod, &p); err != nil {
		t.Fatal(err)
	}
	return p.Labels
}

// labelled returns whether the operator's pod carries LeaderLabel, and
// fails the test if a patch took another label off with it.
func (lt *labelTest) labelled(t *testing.T) bool {
	t.Helper()
	labels := lt.labels(t)
	if labels["app"] != "operator" {
		t.Fatalf("the pod's other labels were changed: %v", labels)
	}
	return labels[leaderlabel.Label] == "true"
}

// startUnlabelled runs every replica's runnable, waits until the label a
// former leader left on the pod is off, and returns stop, which stops the
// runnable and returns once it has.
func (lt *labelTest) startUnlabelled(t *testing.T) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done := make(chan error, 1)
	go func() { done <- lt.l.Unlabelled().Start(ctx) }()
	envtestsuite.Eventually(t, labelTestWait, poll, "a restarted former leader's label is cleared at start", func() error {
		if lt.labelled(t) {
			return errors.New("the pod is still labelled")
		}
		return nil
	})
	return func() {
		t.Helper()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Unlabelled: %v", err)
			}
		case <-time.After(labelTestWait):
			t.Fatalf("Unlabelled did not return within %s of the stop", labelTestWait)
		}
	}
}

// startLabelled runs the leader's runnable in the background; the channel
// gets what it returns.
func (lt *labelTest) startLabelled() <-chan error {
	done := make(chan error, 1)
	go func() { done <- lt.l.Labelled().Start(context.Background()) }()
	return done
}

// wait waits for a runnable's end, at most labelTestWait.
func wait(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(labelTestWait):
		t.Fatalf("%s did not return within %s", what, labelTestWait)
	}
}

// Every replica clears a former leader's label on its own pod at start; a
// stopping leader takes its label off (one PATCH), so that the xDS Service
// stops routing sidecars to its pod, and a replica that never led patches
// nothing when it stops. Once the operator stops, the label stays off:
// Labelled puts nothing on.
func TestLeaderLabelOverAReplicasLife(t *testing.T) {
	for _, tc := range []struct {
		name string
		// lead runs Labelled before the stop, as an elected leader does.
		lead bool
		// wantStopPatches is how many PATCHes the stop sends.
		wantStopPatches int32
	}{
		{name: "a stopping leader removes its label", lead: true, wantStopPatches: 1},
		{name: "a stopping follower patches nothing", lead: false, wantStopPatches: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lt := newLabelTest(t, labelTestWait, interceptor.Funcs{})
			stop := lt.startUnlabelled(t)
			if tc.lead {
				wait(t, "Labelled", lt.startLabelled())
				if !lt.labelled(t) {
					t.Fatal("the leader did not label its pod")
				}
			}
			before := lt.patches.Load()
			stop()
			if n := lt.patches.Load() - before; n != tc.wantStopPatches {
				t.Errorf("the stop sent %d PATCHes, want %d", n, tc.wantStopPatches)
			}
			if lt.labelled(t) {
				t.Fatal("the label is on the pod of a stopped replica")
			}
			// Labelled runs no more once the operator stops.
			before = lt.patches.Load()
			wait(t, "Labelled after the stop", lt.startLabelled())
			if n := lt.patches.Load() - before; n != 0 {
				t.Errorf("Labelled sent %d PATCHes after the stop, want none", n)
			}
			if lt.labelled(t) {
				t.Fatal("the label came back on after the stop")
			}
		})
	}
}

// A stop while the leader's label is being put on (the PATCH lands in the
// apiserver, and its answer never comes) cancels that PATCH and takes the
// label off: it does not wait for the answer, and the label does not stay
// on.
func TestStopDuringLabelling(t *testing.T) {
	var held atomic.Bool
	entered := make(chan struct{})
	lt := newLabelTest(t, labelTestWait, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if string(data) != labelOnPatch || !held.CompareAndSwap(false, true) {
				return c.Patch(ctx, obj, patch, opts...)
			}
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			close(entered)
			<-ctx.Done() // the answer never comes
			return ctx.Err()
		},
	})
	stop := lt.startUnlabelled(t)
	labelled := lt.startLabelled()
	select {
	case <-entered:
	case <-time.After(labelTestWait):
		t.Fatalf("the leader's PATCH did not land within %s", labelTestWait)
	}
	if !lt.labelled(t) {
		t.Fatal("the held PATCH did not label the pod")
	}
	stop()
	wait(t, "Labelled, its PATCH held, after the stop", labelled)
	if lt.labelled(t) {
		t.Fatal("the label stayed on a stopped leader's pod")
	}
}

// When the apiserver does not answer the removal of the label, the stop
// gives it up after StopTimeout rather than holding the operator's
// shutdown.
func TestLabelRemovalOnStopIsBoundedByStopTimeout(t *testing.T) {
	const stopTimeout = 500 * time.Millisecond
	// heldRemoval is what the held removal saw: whether its context had a
	// deadline, its time left when the PATCH began, and why it ended.
	type heldRemoval struct {
		hasDeadline bool
		left        time.Duration
		err         error
	}
	var armed atomic.Bool
	removal := make(chan heldRemoval, 1)
	lt := newLabelTest(t, stopTimeout, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if string(data) != labelOffPatch || !armed.CompareAndSwap(true, false) {
				return c.Patch(ctx, obj, patch, opts...)
			}
			deadline, ok := ctx.Deadline()
			left := time.Until(deadline)
			<-ctx.Done() // the apiserver never answers
			removal <- heldRemoval{hasDeadline: ok, left: left, err: ctx.Err()}
			return ctx.Err()
		},
	})
	stop := lt.startUnlabelled(t)
	wait(t, "Labelled", lt.startLabelled())
	if !lt.labelled(t) {
		t.Fatal("the leader did not label its pod")
	}
	armed.Store(true)
	stop()
	select {
	case r := <-removal:
		if !r.hasDeadline || r.left > stopTimeout {
			t.Errorf("the removal's context: deadline %v, %s away; want one at most StopTimeout (%s) away", r.hasDeadline, r.left, stopTimeout)
		}
		if !errors.Is(r.err, context.DeadlineExceeded) {
			t.Errorf("the held removal ended with %v, want its deadline exceeded", r.err)
		}
	default:
		t.Fatal("the stop did not try to remove the label")
	}
}
