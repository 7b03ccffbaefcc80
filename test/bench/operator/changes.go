package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
	"github.com/weighstation/weighstation/meshconfig/xdsresource"
	"github.com/weighstation/weighstation/test/bench/harness"
	"github.com/weighstation/weighstation/test/bench/operator/opproto"
)

type ctrlObject = ctrlclient.Object

type createObj struct{ obj ctrlObject }

// interleave orders the Topics and Subscriptions for creation: one of
// each in turn, as a namespace fills up, namespace after namespace.
func interleave(w *world) []createObj {
	var out []createObj
	in := func(ns string, obj ctrlObject) createObj {
		c := obj.DeepCopyObject().(ctrlObject)
		c.SetNamespace(ns)
		return createObj{c}
	}
	for _, ns := range w.namespaces {
		for i := 0; i < max(len(w.topics), len(w.subs)); i++ {
			if i < len(w.topics) {
				out = append(out, in(ns, w.topics[i]))
			}
			if i < len(w.subs) {
				out = append(out, in(ns, w.subs[i]))
			}
		}
	}
	return out
}

// changeSpec is one change: the sidecars it must reach and what they must
// then hold, the change itself, and what it may write.
type changeSpec struct {
	desc     string
	affected []int
	pred     func(pod int, st *podState) bool
	// do makes the change and returns when its API call returned (the
	// start of the acknowledgement time).
	do func(ctx context.Context) (time.Time, error)
	// allowed, if set, are the objects ("kind/name") whose status the
	// change may write.
	allowed map[string]bool
	// selected is how many pods the changed object selects (kill switch).
	selected int
	// policyBytes is the marshaled size of the changed Topic's policy
	// (its xDS resource), and appliesTo the pods it applies to.
	policyBytes, appliesTo int
	after                  func(ctx context.Context, m *measurement) error
}

type changeKind struct {
	name, title string
	// prepare lays out run rep of runs.
	prepare func(e *env, ctx context.Context, rep, runs int) (*changeSpec, error)
}

var changeKinds = []changeKind{
	{"killswitch", "engage a kill switch", (*env).killSwitch},
	{"podlabels", "move a pod to another group", (*env).podLabels},
	{"podcreate", "create a pod", (*env).podCreate},
	{"topicsize", "change a Topic's size limit", (*env).topicSize},
}

func spread(rep, repeats, n, offset int) int { return (rep*n/repeats + offset) % n }

func mergePatch(ctx context.Context, c ctrlclient.Client, obj ctrlObject, body string) (time.Time, error) {
	if err := c.Patch(ctx, obj, ctrlclient.RawPatch(types.MergePatchType, []byte(body))); err != nil {
		return time.Time{}, fmt.Errorf("patching %s: %w", obj.GetName(), err)
	}
	return time.Now(), nil
}

// The runs of a change spread over the namespaces, and within one over
// its Subscriptions, pods, groups and Topics.

// (a) engage the kill switch of one Subscription: its group's sidecars
// must hold it engaged.
func (e *env) killSwitch(ctx context.Context, rep, runs int) (*changeSpec, error) {
	// One more each time, so that the runs' groups differ too.
	m := spread(rep, runs, len(e.w.subs), 7+rep)
	n := spread(rep, runs, len(e.w.namespaces), 0)
	ns, name := e.w.namespaces[n], subName(m)
	g := e.w.subGroup(name)
	pods := e.w.podsOf(n, g)
	return &changeSpec{
		desc:     fmt.Sprintf("Subscription %s (group %s, %d pods)", e.w.qualified(ns, name), groupName(g), len(pods)),
		affected: pods,
		selected: len(pods),
		pred:     func(_ int, st *podState) bool { return slices.Contains(st.engaged, name) },
		do: func(ctx context.Context) (time.Time, error) {
			return mergePatch(ctx, e.cl.Client, &v1alpha1.Subscription{ObjectMeta: objMeta(ns, name)}, `{"spec":{"killSwitch":{"engaged":true,"reason":"bench-operator"}}}`)
		},
	}, nil
}

// (b) move one pod to the next group: its sidecar must hold the new
// group's Subscriptions.
func (e *env) podLabels(ctx context.Context, rep, runs int) (*changeSpec, error) {
	i := spread(rep, runs, e.w.size.totalPods(), 3)
	ns := e.w.namespaces[e.w.namespaceOf(i)]
	from := e.w.group(i)
	to := (from + 1) % e.w.size.Groups
	want, n := e.w.subsHash[to], len(e.w.subsOf[to])
	return &changeSpec{
		desc:     fmt.Sprintf("pod %s from %s to %s", e.w.qualified(ns, podName(i)), groupName(from), groupName(to)),
		affected: []int{i},
		pred:     func(_ int, st *podState) bool { return st.subs == want && st.nsubs == n },
		allowed:  e.allowedFor(ns, from, to),
		do: func(ctx context.Context) (time.Time, error) {
			e.w.setGroup(i, to)
			return mergePatch(ctx, e.cl.Client, &corev1.Pod{ObjectMeta: objMeta(ns, podName(i))}, fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, groupLabel, groupName(to)))
		},
	}, nil
}

// (c) create one pod, with its simulated sidecar: the sidecar must hold
// every Topic and its group's Subscriptions. The time runs from the
// pod's create call, and includes its token request and the sidecar's
// connection.
func (e *env) podCreate(ctx context.Context, rep, runs int) (*changeSpec, error) {
	g := spread(rep, runs, e.w.size.Groups, 1)
	nsi := spread(rep, runs, len(e.w.namespaces), 0)
	ns, name := e.w.namespaces[nsi], fmt.Sprintf("p-new-%d", rep)
	if err := e.cl.CreateServiceAccount(ctx, ns, name); err != nil {
		return nil, err
	}
	want, n, topics := e.w.subsHash[g], len(e.w.subsOf[g]), len(e.w.topics)
	index := e.w.addPod(name, nsi, g)
	return &changeSpec{
		desc:     fmt.Sprintf("pod %s in %s", e.w.qualified(ns, name), groupName(g)),
		affected: []int{index},
		pred:     func(_ int, st *podState) bool { return st.subs == want && st.nsubs == n && st.topics == topics },
		allowed:  e.allowedFor(ns, g),
		do: func(ctx context.Context) (time.Time, error) {
			p := newPod(ns, name, g)
			if err := e.cl.Client.Create(ctx, p); err != nil {
				return time.Time{}, fmt.Errorf("creating pod %s: %w", name, err)
			}
			t0 := time.Now()
			spec, err := e.cl.token(ctx, p, index)
			if err != nil {
				return t0, err
			}
			return t0, e.swarm.add(spec)
		},
	}, nil
}

// (d) change the size limit of one Topic that applies to every pod:
// every sidecar must hold the new limit.
func (e *env) topicSize(ctx context.Context, rep, runs int) (*changeSpec, error) {
	j := spread(rep, runs, len(e.w.topics), 1)
	for hasPublishers(j) {
		j = (j + 1) % len(e.w.topics)
	}
	n := spread(rep, runs, len(e.w.namespaces), 0)
	ns, name := e.w.namespaces[n], topicName(j)
	limit := int64(200000 + 1000*rep + j)
	if err := e.swarm.command(opproto.Command{Op: opproto.OpProbe, Topic: name}); err != nil {
		return nil, err
	}
	pods := e.w.podsOf(n, -1)
	spec := &changeSpec{
		desc:      fmt.Sprintf("Topic %s maxMessageBytes to %d", e.w.qualified(ns, name), limit),
		affected:  pods,
		appliesTo: len(pods),
		pred:      func(_ int, st *podState) bool { return st.probe == limit },
		do: func(ctx context.Context) (time.Time, error) {
			return mergePatch(ctx, e.cl.Client, &v1alpha1.Topic{ObjectMeta: objMeta(ns, name)}, fmt.Sprintf(`{"spec":{"limits":{"maxMessageBytes":%d}}}`, limit))
		},
	}
	spec.after = func(ctx context.Context, m *measurement) error {
		var t v1alpha1.Topic
		if err := e.cl.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, &t); err != nil {
			return err
		}
		m.PolicyBytes = proto.Size(xdsresource.TopicResource(desired.TopicPolicyOf(t)))
		m.AppliesTo = spec.appliesTo
		return nil
	}
	return spec, nil
}

// allowedFor is what a change to the pods of groups of namespace ns may
// write: the Subscriptions that select them and the Topics whose
// publishers do.
func (e *env) allowedFor(ns string, groups ...int) map[string]bool {
	out := map[string]bool{}
	for _, g := range groups {
		for _, s := range e.w.subsOf[g] {
			out[e.w.objKey("subscription", ns, s)] = true
		}
		for _, t := range e.w.publishersOf[g] {
			out[e.w.objKey("topic", ns, t)] = true
		}
	}
	return out
}

// runChanges makes one kind of change -repeats times.
func (e *env) runChanges(ctx context.Context, ch changeKind) error {
	res := &changeResult{Name: ch.name, Title: ch.title}
	e.worldResult.Changes = append(e.worldResult.Changes, res)
	var stopPerf func()
	if e.profileDir != "" {
		stopPerf = startPerf(filepath.Join(e.profileDir, fmt.Sprintf("%s-%s", e.w.size.Name, ch.name)), e.op.Pid())
		defer stopPerf()
	}
	runs := max(e.o.repeats, e.w.size.MinRuns[ch.name])
	for rep := range runs {
		spec, err := ch.prepare(e, ctx, rep, runs)
		if err != nil {
			return err
		}
		m, err := e.measure(ctx, spec)
		if m != nil {
			res.Runs = append(res.Runs, m)
			progress("%s #%d (%s): reconciles %v, status writes %d (%v), operator CPU %.0f ms (net %.0f), last sidecar %.1f ms, settled in %.1f s",
				ch.name, rep+1, spec.desc, m.Reconciles, m.StatusWrites, m.WritesBy, m.CPUMillis, m.NetCPUMillis, m.LastAckMillis, m.SettleSeconds)
			if m.PolicyBytes > 0 {
				progress("  pushed: %d resource bytes (%v) in %d responses of %d bytes; policy %d B x %d pods", m.ResourceBytes, m.ResourceBytesByKind, m.Responses, m.ResponseBytes, m.PolicyBytes, m.AppliesTo)
			}
			if len(m.WritesOutside) > 0 {
				progress("  writes outside the affected objects: %v", head(m.WritesOutside, 10))
			}
		}
		if err != nil {
			return fmt.Errorf("#%d (%s): %w", rep+1, spec.desc, err)
		}
	}
	if stopPerf != nil {
		stopPerf()
	}
	res.Median = medianOf(res.Runs)
	return nil
}

// measurement is one change's cost.
type measurement struct {
	Desc                string             `json:"desc"`
	Reconciles          map[string]float64 `json:"reconciles"`
	ReconcilesTotal     float64            `json:"reconcilesTotal"`
	StatusWrites        int                `json:"statusWrites"`
	WritesByKind        map[string]int     `json:"statusWritesByKind"`
	WritesBy            map[string]int     `json:"statusWritesByOwner"`
	WrittenObjects      int                `json:"writtenObjects"`
	WritesOutside       []string           `json:"writesOutside,omitempty"`
	Requests            map[string]float64 `json:"operatorRequestsByMethod"`
	Pushes              float64            `json:"pushes"`
	ACKs                float64            `json:"acks"`
	CPUMillis           float64            `json:"cpuMillis"`
	NetCPUMillis        float64            `json:"netCpuMillis"`
	WallSeconds         float64            `json:"wallSeconds"`
	Affected            int                `json:"affectedSidecars"`
	Selected            int                `json:"selectedPods,omitempty"`
	LastAckMillis       float64            `json:"lastAckMillis"`
	MedianAckMillis     float64            `json:"medianAckMillis"`
	SettleSeconds       float64            `json:"settleSeconds"`
	Responses           int64              `json:"responses"`
	ResponseBytes       int64              `json:"responseBytes"`
	ResourceBytes       int64              `json:"resourceBytes"`
	ResourceBytesByKind map[string]int64   `json:"resourceBytesByKind"`
	ResourcesByKind     map[string]int64   `json:"resourcesByKind"`
	SidecarApplies      int64              `json:"sidecarApplies"`
	PolicyBytes         int                `json:"policyBytes,omitempty"`
	AppliesTo           int                `json:"appliesTo,omitempty"`
}

func (e *env) measure(ctx context.Context, spec *changeSpec) (*measurement, error) {
	m := &measurement{Desc: spec.desc, Affected: len(spec.affected), Selected: spec.selected}
	m0, err := scrape(e.metricsURL)
	if err != nil {
		return nil, err
	}
	c0, err := e.swarm.counters(30 * time.Second) // after any probe command: a barrier
	if err != nil {
		return nil, err
	}
	cpu0, err := e.op.CPU()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	w := e.swarm.wait(spec.affected, spec.pred)
	t0, err := spec.do(ctx)
	if err != nil {
		return nil, err
	}
	got, ackErr := e.swarm.result(w, t0.Add(e.o.changeTimeout))
	settled, err := e.settle(t0)
	if err != nil {
		return nil, err
	}
	cpu1, err := e.op.CPU()
	if err != nil {
		return nil, err
	}
	m1, err := scrape(e.metricsURL)
	if err != nil {
		return nil, err
	}
	c1, err := e.swarm.counters(30 * time.Second)
	if err != nil {
		return nil, err
	}
	wall := settled.Sub(start)
	m.WallSeconds = wall.Seconds()
	m.SettleSeconds = settled.Sub(t0).Seconds()
	m.CPUMillis = float64((cpu1 - cpu0).Milliseconds())
	m.NetCPUMillis = max(0, m.CPUMillis-e.idlePerSec*wall.Seconds()*1000)
	m.Reconciles = diff(m1.reconciles(), m0.reconciles())
	m.ReconcilesTotal = total(m.Reconciles)
	m.Requests = diff(m1.requests(), m0.requests())
	m.Pushes = m1["weighstation_operator_xds_pushes_total"] - m0["weighstation_operator_xds_pushes_total"]
	m.ACKs = m1["weighstation_operator_xds_acks_total"] - m0["weighstation_operator_xds_acks_total"]

	writes := e.watch.writesBetween(start, settled)
	m.StatusWrites = len(writes)
	m.WritesByKind, m.WritesBy = map[string]int{}, map[string]int{}
	objs := map[string]bool{}
	for _, wr := range writes {
		m.WritesByKind[wr.kind]++
		m.WritesBy[wr.by]++
		key := e.w.objKey(wr.kind, wr.ns, wr.name)
		if !objs[key] && spec.allowed != nil && !spec.allowed[key] {
			m.WritesOutside = append(m.WritesOutside, key)
		}
		objs[key] = true
	}
	sort.Strings(m.WritesOutside)
	m.WrittenObjects = len(objs)

	var acks []float64
	for _, at := range got {
		d := float64(at-t0.UnixNano()) / 1e6
		acks = append(acks, max(d, 0))
	}
	if len(acks) > 0 {
		slices.Sort(acks)
		m.LastAckMillis = acks[len(acks)-1]
		m.MedianAckMillis = acks[len(acks)/2]
	}
	m.Responses = c1.Counters.Responses - c0.Counters.Responses
	m.ResponseBytes = c1.Counters.ResponseBytes - c0.Counters.ResponseBytes
	m.ResourceBytesByKind, m.ResourcesByKind = map[string]int64{}, map[string]int64{}
	for k, v := range c1.Counters.ResourceBytes {
		if d := v - c0.Counters.ResourceBytes[k]; d != 0 {
			m.ResourceBytesByKind[k] = d
			m.ResourceBytes += d
		}
	}
	for k, v := range c1.Counters.Resources {
		if d := v - c0.Counters.Resources[k]; d != 0 {
			m.ResourcesByKind[k] = d
		}
	}
	m.SidecarApplies = c1.Counters.AppliedConfigs - c0.Counters.AppliedConfigs
	if spec.after != nil {
		if err := spec.after(ctx, m); err != nil {
			return m, err
		}
	}
	if ackErr != nil {
		return m, fmt.Errorf("the affected sidecars: %w", ackErr)
	}
	return m, nil
}

// settle waits until no reconcile counter of the operator moved and the
// watch saw no status write for -quiet, and returns when it last saw
// either (at least from).
func (e *env) settle(from time.Time) (time.Time, error) {
	last := from
	var prev float64 = -1
	var lastMove time.Time = from
	err := poll(e.o.settleTimeout, 500*time.Millisecond, e.op.Alive, func() (bool, string) {
		m, err := scrape(e.metricsURL)
		if err != nil {
			return false, err.Error()
		}
		now := time.Now()
		t := total(m.reconciles())
		if t != prev {
			prev, lastMove = t, now
		}
		last = lastMove
		if ev := e.watch.lastEvent(); ev.After(last) {
			last = ev
		}
		if from.After(last) {
			last = from
		}
		return now.Sub(last) >= e.o.quiet, fmt.Sprintf("still reconciling (%.0f reconciles so far)", t)
	})
	return time.Now(), err
}

// startPerf records pid with perf until the returned function is called,
// then writes perf's report beside the data.
func startPerf(base string, pid int) func() {
	path, err := exec.LookPath("perf")
	if err != nil {
		progress("no perf on PATH: the operator is not profiled")
		return func() {}
	}
	data := base + ".perf.data"
	cmd := exec.Command(path, "record", "-F", "499", "-g", "-p", strconv.Itoa(pid), "-o", data)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		progress("perf: %v", err)
		return func() {}
	}
	stop := benchharness.AtExit(func() {
		benchharness.StopCommand(cmd, syscall.SIGINT, 30*time.Second)
		for suffix, args := range map[string][]string{
			".self.txt":     {"report", "-i", data, "--no-children", "--sort", "sym", "--stdio", "--percent-limit", "0.5"},
			".children.txt": {"report", "-i", data, "--children", "--sort", "sym", "--stdio", "-g", "none", "--percent-limit", "2"},
		} {
			out, err := exec.Command(path, args...).Output()
			if err != nil {
				progress("perf report: %v", err)
				continue
			}
			_ = os.WriteFile(base+suffix, out, 0o644)
		}
	})
	time.Sleep(500 * time.Millisecond) // perf attaches to every thread
	return stop
}

func objMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}
