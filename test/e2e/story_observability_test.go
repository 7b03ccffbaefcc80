//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// Bounds of the observability story.
const (
	prometheusReady = 30 * time.Second
	// prometheusTargets: discovery, then a first scrape of every pod.
	prometheusTargets = 90 * time.Second
	// prometheusSees bounds each wait for Prometheus to show what the story
	// just did: a few scrapes, the operator's push, a breaker's window.
	prometheusSees  = 60 * time.Second
	prometheusStop  = 15 * time.Second
	prometheusQuery = 15 * time.Second
	// observeRateInterval is Grafana's $__rate_interval for the story's
	// queries: four scrapes and a margin, as Grafana computes it.
	observeRateInterval = "10s"
	// spamFilterDelay makes spam-filter answer slower than its automatic
	// kill switch allows (100ms over 3s, policy.yaml.tmpl).
	spamFilterDelay = 300 * time.Millisecond
	observePodReady = 3 * time.Minute
	// observePause bounds the subscriber's pause, should the story not
	// end it (POST /resume); observeStall is how long its sidecar's queue
	// may stay empty before the story gives the stall up.
	observePause = 30 * time.Second
	observeStall = 15 * time.Second
	brokersBack  = 3 * time.Minute
)

// stepObservability runs Prometheus as a child of the test, discovering
// pods by their prometheus.io annotations (kubernetes_sd, role pod, the
// usual relabelling), and checks that it scrapes every operator pod,
// every broker and every sidecar (the annotations the webhook adds). Then,
// while it scrapes every 2 s, the story moves the mesh, each change waited
// for until Prometheus shows it: a publisher and a subscriber come, under
// a Subscription of their own; the subscriber stops reading until its
// queue overflows, and reads again; a kill switch is pulled and released;
// spam-filter is made slow until its automatic kill switch trips, and fast
// until it closes; a broker is deleted (destructive runs); the two pods
// go. Finally every query of the chart's Grafana dashboard (read from its
// ConfigMap, labelled grafana_dashboard=1) must return a series over the
// story, and every panel must have moved, except one that reads only
// metrics that move with what this run could not bring about: a broker
// fault without E2E_DESTRUCTIVE, a consumer that stops reading without
// the probe's pause (DashboardProblems). It prints a table: panel, query,
// series, first → last value.
func stepObservability(s *stepRun) {
	ctx, cfg := s.ctx, s.cfg
	sidecars := s.sidecarPods(ctx)
	// Prometheus scrapes pods at their IPs, from where the stories run.
	if cfg.PodAccess == "proxy" {
		s.skipf("E2E_POD_ACCESS=proxy: Prometheus, run by the test, scrapes pods at their IPs, which need the cluster's network (make e2e runs the stories inside it)")
	}
	// The first read of a pod decides how pods are reached, unless an
	// earlier step's did.
	_, err := s.c.podGet(ctx, &sidecars[0], SidecarMetricsPort, "/metrics")
	if !s.c.direct {
		s.skipf("pod IPs are not reachable from here (the stories reach pods through the apiserver's proxy): Prometheus, run by the test, scrapes pods at their IPs; run the stories inside the cluster's network (make e2e)")
	}
	if err != nil {
		s.fatalf("%v", err)
	}
	env, err := OSEnvironment()
	if err != nil {
		s.fatalf("%v", err)
	}
	bin, err := PrometheusBinary(env)
	if err != nil {
		s.fatalf("%v: install Prometheus (apt-get install prometheus; hack/setup-node.sh does) or set E2E_PROMETHEUS", err)
	}
	s.checkScrapeAnnotations(sidecars)
	queries, vars := s.readDashboard(ctx)

	prom := s.startPrometheus(ctx, bin)
	start := s.waitTargets(ctx, prom)

	unmet := s.moveTheMesh(ctx, prom)
	end := time.Now()

	var results []QueryResult
	for _, q := range queries {
		r := QueryResult{Query: q}
		r.Expr, r.Err = ExpandExpr(q.Expr, vars)
		if r.Err == nil {
			var m model.Matrix
			m, r.Err = prom.queryRange(ctx, r.Expr, start, end)
			r.Move = Move(m)
		}
		results = append(results, r)
	}
	say("the dashboard's queries over the story (%s, a point every %s; $__rate_interval=%s, $namespace=%s):",
		end.Sub(start).Round(time.Second), PrometheusScrapeInterval, observeRateInterval, vars["namespace"])
	for _, line := range strings.Split(strings.TrimRight(DashboardTable(results), "\n"), "\n") {
		fmt.Println("          " + line)
	}
	for _, c := range unmet {
		s.note("not in this run: %s; panels that read %s need not move", c.Name, strings.Join(c.Metrics, ", "))
	}
	for _, p := range DashboardProblems(results, unmet) {
		s.errorf("%s", p)
	}
	s.measure("Prometheus started → every dashboard panel queried", time.Since(prom.started), 0)
	if err := prom.stop(); err != nil {
		s.errorf("stopping Prometheus: %v", err)
	}
}

// checkScrapeAnnotations: the webhook gave every injected pod the
// sidecar's scrape annotations (the stories' pods have none of their own).
func (s *stepRun) checkScrapeAnnotations(pods []corev1.Pod) {
	want := map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(SidecarMetricsPort), "prometheus.io/path": "/metrics"}
	for _, p := range pods {
		for k, v := range want {
			if p.Annotations[k] != v {
				s.errorf("injected pod %s: annotation %s=%q, want %q (the webhook adds it)", p.Name, k, p.Annotations[k], v)
			}
		}
	}
}

// readDashboard reads the chart's dashboard from its ConfigMap, as
// Grafana's sidecar finds it, and returns its queries and the values of
// its variables.
func (s *stepRun) readDashboard(ctx context.Context) ([]PanelQuery, map[string]string) {
	args := []string{"get", "configmap", "-n", s.cfg.ReleaseNamespace, "-l", DashboardLabel + "=1", "-o", "json"}
	say("$ kubectl %s", strings.Join(args, " "))
	out, err := s.c.kubectl(ctx, args...)
	if err != nil {
		s.fatalf("%v", err)
	}
	var list corev1.ConfigMapList
	if err := yaml.Unmarshal([]byte(out), &list); err != nil {
		s.fatalf("decoding the ConfigMaps: %v", err)
	}
	if len(list.Items) != 1 {
		s.fatalf("%d ConfigMaps labelled %s=1 in %s, want the chart's dashboard alone", len(list.Items), DashboardLabel, s.cfg.ReleaseNamespace)
	}
	cm := list.Items[0]
	data, ok := cm.Data[DashboardKey]
	if !ok {
		s.fatalf("ConfigMap %s has no %s", cm.Name, DashboardKey)
	}
	d, err := ParseDashboard([]byte(data))
	if err != nil {
		s.fatalf("ConfigMap %s: %v", cm.Name, err)
	}
	queries, err := d.Queries()
	if err != nil {
		s.errorf("ConfigMap %s: %v", cm.Name, err)
	}
	s.note("dashboard %q (ConfigMap %s): %d queries", d.Title, cm.Name, len(queries))
	return queries, d.Variables(observeRateInterval)
}

// promServer is the stories' Prometheus, a child process.
type promServer struct {
	base    string // http://127.0.0.1:port
	cmd     *exec.Cmd
	exited  chan error
	logPath string
	started time.Time
	http    *http.Client
	stopped bool
}

// errNoKubernetesSD: the Prometheus binary was built without Kubernetes
// discovery.
var errNoKubernetesSD = errors.New("this Prometheus has no Kubernetes discovery")

// startPrometheus starts Prometheus with kubernetes_sd (role pod) on the
// stories' kubeconfig. A Prometheus built without Kubernetes discovery
// (Debian's) refuses that configuration: it is then started again with
// http_sd, from a server of the test that lists the pods as the pod role
// does (PodTargetGroups), under the same relabelling.
func (s *stepRun) startPrometheus(ctx context.Context, bin string) *promServer {
	p, err := s.runPrometheus(ctx, bin, Discovery{Kubeconfig: s.cfg.Kubeconfig})
	if errors.Is(err, errNoKubernetesSD) {
		s.note("%s was built without Kubernetes discovery (it says %q, as Debian's does): the test serves the pod role's targets and meta labels over http_sd instead, under the same relabelling", bin, KubernetesSDMissing)
		p, err = s.runPrometheus(ctx, bin, Discovery{HTTPURL: s.serveTargets()})
	}
	if err != nil {
		s.fatalf("%v", err)
	}
	return p
}

// runPrometheus writes the configuration for d into a directory of the
// test's and starts Prometheus on a free port of 127.0.0.1. It is stopped
// when the step ends, however it ends (before the directory is removed).
func (s *stepRun) runPrometheus(ctx context.Context, bin string, d Discovery) (*promServer, error) {
	dir := s.t.TempDir()
	conf, err := PrometheusConfig(d, PrometheusScrapeInterval)
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, conf, 0o600); err != nil {
		return nil, fmt.Errorf("writing %s: %w", confPath, err)
	}
	addr, err := freeLocalAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("creating Prometheus's log: %w", err)
	}
	p := &promServer{base: "http://" + addr, logPath: logPath, exited: make(chan error, 1), http: &http.Client{Timeout: prometheusQuery}}
	p.cmd = exec.Command(bin, PrometheusArgs(confPath, filepath.Join(dir, "data"), addr)...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	say("$ %s %s # job %s: %s, every %s", bin, strings.Join(p.cmd.Args[1:], " "), PrometheusJob, d, PrometheusScrapeInterval)
	if err := p.cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	p.started = time.Now()
	go func() {
		p.exited <- p.cmd.Wait()
		_ = logFile.Close()
	}()
	s.t.Cleanup(func() {
		if err := p.stop(); err != nil {
			say("stopping Prometheus: %v", err)
		}
		if s.t.Failed() {
			p.printLog(40)
		}
	})
	var exitErr error
	_, err = Poll(ctx, "Prometheus ready at "+p.base, prometheusReady, apiPoll, func(ctx context.Context) (bool, string) {
		if exitErr != nil {
			return false, fmt.Sprintf("exited: %v", exitErr)
		}
		select {
		case exitErr = <-p.exited:
			p.exited <- exitErr // for stop
			if exitErr == nil {
				exitErr = errors.New("exit status 0")
			}
			// Exited: nothing will change.
			return true, ""
		default:
		}
		_, err := p.get(ctx, "/-/ready")
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		return nil, err
	}
	if exitErr != nil {
		p.stopped = true // nothing left to stop
		b, _ := os.ReadFile(logPath)
		if strings.Contains(string(b), KubernetesSDMissing) {
			return nil, fmt.Errorf("%s: %w", bin, errNoKubernetesSD)
		}
		p.printLog(20)
		return nil, fmt.Errorf("Prometheus exited before it was ready: %w", exitErr)
	}
	say("Prometheus %s ready in %s, its log %s", p.base, time.Since(p.started).Round(time.Millisecond), logPath)
	return p, nil
}

// freeLocalAddr is a free port of 127.0.0.1: the kernel's, given back for
// Prometheus to take.
func freeLocalAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("finding a free port: %w", err)
	}
	return addr, nil
}

// serveTargets serves http_sd's answer on 127.0.0.1 until the step ends:
// every pod of the cluster, listed at each of Prometheus's refreshes, as
// the pod role's targets. It returns the URL.
func (s *stepRun) serveTargets() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.fatalf("a port for http_sd: %v", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/pods", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		pods, err := s.c.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(PodTargetGroups(pods.Items))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: requestTimeout}
	go func() { _ = srv.Serve(ln) }()
	s.t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/pods"
}

// stop ends Prometheus: SIGTERM, then SIGKILL after prometheusStop. Once.
func (p *promServer) stop() error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	select {
	case err := <-p.exited:
		return fmt.Errorf("Prometheus had exited: %v", err)
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM to Prometheus: %w", err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			return fmt.Errorf("Prometheus exited after SIGTERM: %w", err)
		}
		say("Prometheus stopped")
		return nil
	case <-time.After(prometheusStop):
	}
	_ = p.cmd.Process.Kill()
	err := <-p.exited
	return fmt.Errorf("Prometheus did not stop within %s of SIGTERM, killed: %v", prometheusStop, err)
}

func (p *promServer) printLog(lines int) {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		say("Prometheus's log: %v", err)
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	say("the last %d lines of Prometheus's log:", lines)
	for _, l := range all[max(0, len(all)-lines):] {
		fmt.Println("          " + l)
	}
}

func (p *promServer) get(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	// The API answers errors with a JSON body of their own (400, 422).
	if resp.StatusCode != http.StatusOK && !bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")) {
		return nil, fmt.Errorf("GET %s: %s: %.200s", path, resp.Status, b)
	}
	return b, nil
}

func (p *promServer) query(ctx context.Context, expr string) (model.Vector, error) {
	b, err := p.get(ctx, QueryPath(expr))
	if err != nil {
		return nil, err
	}
	v, err := ParseVector(b)
	if err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	return v, nil
}

func (p *promServer) queryRange(ctx context.Context, expr string, start, end time.Time) (model.Matrix, error) {
	b, err := p.get(ctx, QueryRangePath(expr, start, end, PrometheusScrapeInterval))
	if err != nil {
		return nil, err
	}
	return ParseMatrix(b)
}

// waitTargets waits until Prometheus scrapes, healthy, every operator
// pod at the operator's metrics port, every broker at the brokers', and
// every sidecar at the sidecar's, and returns when it first did.
func (s *stepRun) waitTargets(ctx context.Context, p *promServer) time.Time {
	var want []WantTarget
	for _, c := range []struct {
		component string
		port      int
	}{{ComponentOperator, OperatorMetricsPort}, {ComponentBroker, BrokerMetricsPort}} {
		pods, err := s.c.kube.CoreV1().Pods(s.cfg.ReleaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: componentSelector(c.component)})
		if err != nil || len(pods.Items) == 0 {
			s.fatalf("listing the %s pods: %v (%d)", c.component, err, len(pods.Items))
		}
		for _, pod := range pods.Items {
			want = append(want, WantTarget{Namespace: pod.Namespace, Pod: pod.Name, Port: c.port})
		}
	}
	for _, pod := range s.sidecarPods(ctx) {
		want = append(want, WantTarget{Namespace: pod.Namespace, Pod: pod.Name, Port: SidecarMetricsPort})
	}
	var targets []Target
	at, err := Poll(ctx, fmt.Sprintf("Prometheus scraping the %d pods of the mesh", len(want)), prometheusTargets, apiPoll, func(ctx context.Context) (bool, string) {
		b, err := p.get(ctx, "/api/v1/targets?state=active")
		if err != nil {
			return false, err.Error()
		}
		if targets, err = ParseTargets(b); err != nil {
			return false, err.Error()
		}
		missing := MissingTargets(want, targets, PrometheusJob)
		return len(missing) == 0, fmt.Sprintf("%d active targets; not scraped: %s", len(targets), strings.Join(missing, ", "))
	})
	if err != nil {
		s.fatalf("%v", err)
	}
	s.measure("Prometheus started → every operator pod, broker and sidecar scraped", at.Sub(p.started), 0)
	var names []string
	for _, w := range want {
		names = append(names, w.String())
	}
	s.note("%d active targets, among them the mesh's %d pods: %s", len(targets), len(want), strings.Join(names, ", "))
	return at
}

// waitProm waits until cond (a PromQL expression with a comparison)
// returns a series: Prometheus has seen it. show is printed as the last
// status. It fails the step after prometheusSees.
func (s *stepRun) waitProm(ctx context.Context, p *promServer, what, cond, show string) time.Time {
	at, err := s.pollProm(ctx, p, what, cond, show, prometheusSees)
	if err != nil {
		s.fatalf("%v", err)
	}
	return at
}

// pollProm is waitProm's wait, bounded by timeout, returning its error.
func (s *stepRun) pollProm(ctx context.Context, p *promServer, what, cond, show string, timeout time.Duration) (time.Time, error) {
	seen := "nothing yet"
	at, err := Poll(ctx, "Prometheus showing "+what, timeout, apiPoll, func(ctx context.Context) (bool, string) {
		v, err := p.query(ctx, cond)
		if err != nil {
			return false, fmt.Sprintf("%v (last seen: %s)", err, seen)
		}
		if len(v) > 0 {
			return true, ""
		}
		if shown, err := p.query(ctx, show); err == nil {
			seen = fmt.Sprintf("%s = %s", show, shown)
		}
		return false, seen
	})
	if err == nil {
		say("Prometheus shows %s", what)
	}
	return at, err
}

// moveTheMesh makes what the dashboard's panels show move, each change
// seen by Prometheus before the next, and returns the conditions it could
// not make happen here: a broker fault (E2E_DESTRUCTIVE only), a stalled
// consumer (a probe that can pause).
func (s *stepRun) moveTheMesh(ctx context.Context, p *promServer) (unmet []Condition) {
	ns := s.cfg.AppNamespace
	sel := func(extra string) string { return fmt.Sprintf(`{namespace=%q%s}`, ns, extra) }
	s.suspects = []string{PodObservePublisher, PodObserveSubscriber, "spam-filter", "orders-api", PodRequester, PodResponder}

	// Pods come: their sidecars connect, open xDS streams, are issued
	// credentials; a broker holds more connections; messages flow.
	docs := []string{s.m.ObserveSubscription()}
	var names []string
	for _, pp := range ObserveProbes() {
		d, err := s.m.Probe(pp)
		if err != nil {
			s.fatalf("%v", err)
		}
		docs, names = append(docs, d), append(names, pp.Name)
	}
	s.t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), kubectlTimeout)
		defer cancel()
		_, _ = s.c.kubectl(cctx, append([]string{"delete", "pod", "-n", ns, "--ignore-not-found", "--wait=false"}, names...)...)
		_, _ = s.c.kubectl(cctx, "delete", "subscription", SubscriptionObserve, "-n", ns, "--ignore-not-found", "--wait=false")
	})
	if err := s.c.apply(ctx, "a Subscription and two pods for Prometheus to see come and go", join(docs...)); err != nil {
		s.fatalf("%v", err)
	}
	if _, err := s.c.waitPodsReady(ctx, ns, names, observePodReady); err != nil {
		s.fatalf("%v", err)
	}
	connected := MetricBrokerConnected + sel(fmt.Sprintf(`,pod=~%q`, strings.Join(names, "|")))
	s.waitProm(ctx, p, "the new pods' sidecars connected to a broker", fmt.Sprintf("count(%s == 1) == %d", connected, len(names)), "count("+connected+" == 1)")
	arrived := fmt.Sprintf(`sum(increase(%s%s[1m]))`, MetricArrived, sel(fmt.Sprintf(`,subscription=%q`, SubscriptionObserve)))
	s.waitProm(ctx, p, SubjectObserve+" flowing", arrived+" > 0", arrived)

	// A consumer stops reading: its queue fills and overflows; read again,
	// it drains.
	if !s.stallSubscriber(ctx, p, sel) {
		unmet = append(unmet, StalledConsumer)
	}

	// A kill switch by hand: the responder's sidecar stops delivering, the
	// requester gets no-responders answers; then released.
	s.releaseKillSwitchAtEnd()
	killed := fmt.Sprintf(`sum(weighstation_sidecar_killed%s)`, sel(fmt.Sprintf(`,subscription=%q`, SubscriptionRPC)))
	if err := s.c.setKillSwitch(ctx, ns, SubscriptionRPC, true, "e2e: observability story"); err != nil {
		s.fatalf("%v", err)
	}
	s.waitProm(ctx, p, SubscriptionRPC+"'s kill switch engaged", killed+" >= 1", killed)
	noResponders := fmt.Sprintf(`sum(increase(weighstation_sidecar_no_responders_total%s[1m]))`, sel(`,direction="received"`))
	s.waitProm(ctx, p, "no-responders answers to the requester", noResponders+" > 0", noResponders)
	if err := s.c.setKillSwitch(ctx, ns, SubscriptionRPC, false, ""); err != nil {
		s.fatalf("%v", err)
	}
	s.waitProm(ctx, p, SubscriptionRPC+"'s kill switch released", killed+" == 0", killed)

	// A slow consumer: spam-filter made slower than its automatic kill
	// switch allows, until the switch trips; made fast again, until it
	// closes.
	spam, err := s.c.pod(ctx, ns, "spam-filter")
	if err != nil {
		s.fatalf("%v", err)
	}
	slowed := false
	s.t.Cleanup(func() {
		// A step that failed while spam-filter was slow leaves it fast.
		if !slowed {
			return
		}
		cctx, cancel := context.WithTimeout(context.Background(), podHTTPTimeout)
		defer cancel()
		_ = s.slowSpamFilter(cctx, spam, 0)
	})
	slowed = true
	if err := s.slowSpamFilter(ctx, spam, spamFilterDelay); err != nil {
		s.fatalf("%v", err)
	}
	tripped := fmt.Sprintf(`sum(weighstation_sidecar_killed%s)`, sel(`,subscription="spam-filter"`))
	s.waitProm(ctx, p, "spam-filter's automatic kill switch tripped", tripped+" >= 1", tripped)
	if err := s.slowSpamFilter(ctx, spam, 0); err != nil {
		s.fatalf("%v", err)
	}
	slowed = false
	closed := fmt.Sprintf(`sum(weighstation_sidecar_kill_switch_state%s)`, sel(`,subscription="spam-filter",state="closed"`))
	s.waitProm(ctx, p, "spam-filter's automatic kill switch closed again", closed+" >= 1", closed)

	// A broker fault: the sidecars it held reconnect to another.
	if s.cfg.Destructive {
		victim, n := s.busiestBroker(ctx)
		t0 := time.Now()
		if err := s.c.deletePod(ctx, s.cfg.ReleaseNamespace, victim.Name); err != nil {
			s.fatalf("%v", err)
		}
		reconnects := fmt.Sprintf(`sum(increase(%s%s[1m]))`, MetricBrokerReconnects, sel(""))
		at := s.waitProm(ctx, p, fmt.Sprintf("sidecars reconnected after broker %s (%g connections) was deleted", victim.Name, n), reconnects+" > 0", reconnects)
		s.addWindow("broker "+victim.Name+" deleted (observability)", t0, at.Add(lossWindowMargin))
		if _, err := s.c.waitWorkloadsReady(ctx, s.cfg.ReleaseNamespace, brokersBack); err != nil {
			s.fatalf("%v", err)
		}
		all := fmt.Sprintf(`sum(%s%s) == count(%s%s)`, MetricBrokerConnected, sel(""), MetricBrokerConnected, sel(""))
		s.waitProm(ctx, p, "every sidecar connected again", all, fmt.Sprintf(`sum(%s%s)`, MetricBrokerConnected, sel("")))
	} else {
		unmet = append(unmet, BrokerFault)
	}

	// The pods go: their credentials are revoked, their series end.
	for _, name := range names {
		pod, err := s.c.pod(ctx, ns, name)
		if err != nil {
			s.fatalf("%v", err)
		}
		if err := s.c.deletePod(ctx, ns, name); err != nil {
			s.fatalf("%v", err)
		}
		if _, err := s.c.waitPodGone(ctx, ns, name, pod.UID, observePodReady); err != nil {
			s.fatalf("%v", err)
		}
	}
	s.waitProm(ctx, p, "the new pods' series gone", "absent("+connected+")", "count("+connected+")")
	revoked := `sum(increase(` + MetricCredentialsRevoke + `[1m]))`
	s.waitProm(ctx, p, "their credentials revoked", revoked+" > 0", revoked)
	return unmet
}

// stallSubscriber pauses the observed subscriber until its sidecar's
// queue overflows, then resumes it until the queue drains, and reports
// whether it could. The pause may not reach the sidecar: what the
// subscriber does not read fills the sockets between them first (the
// probe keeps them small, test/e2e/probe); when its queue has held
// nothing within observeStall, the step says so and goes on.
func (s *stepRun) stallSubscriber(ctx context.Context, p *promServer, sel func(string) string) bool {
	if !s.pauseSubscriber(ctx) {
		return false
	}
	pending := fmt.Sprintf(`sum(%s%s)`, MetricPending, sel(fmt.Sprintf(`,subscription=%q`, SubscriptionObserve)))
	if _, err := s.pollProm(ctx, p, SubscriptionObserve+"'s queue holding messages", pending+" > 0", pending, observeStall); err != nil {
		s.note("the paused subscriber's sidecar queued nothing (%v): its sockets took what it did not read; no consumer stalled in this run", err)
		s.resumeSubscriber(ctx)
		return false
	}
	s.waitProm(ctx, p, SubscriptionObserve+"'s queue full", fmt.Sprintf("%s >= %d", pending, ObserveMaxPending), pending)
	overflow := fmt.Sprintf(`sum(increase(%s%s[1m]))`, MetricDropped, sel(fmt.Sprintf(`,subscription=%q,reason="overflow"`, SubscriptionObserve)))
	s.waitProm(ctx, p, SubscriptionObserve+"'s overflow drops", overflow+" > 0", overflow)
	s.resumeSubscriber(ctx)
	s.waitProm(ctx, p, SubscriptionObserve+"'s queue drained", pending+" == 0", pending)
	return true
}

// pauseSubscriber asks the observed subscriber to stop reading (the
// probe's POST /pause?for=, which ends by itself after observePause) and
// reports whether it did: a probe without the control answers 404.
func (s *stepRun) pauseSubscriber(ctx context.Context) bool {
	status, body, err := s.postProbe(ctx, PodObserveSubscriber, "/pause?for="+observePause.String())
	switch {
	case err != nil:
		s.fatalf("%v", err)
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		s.note("the probe cannot pause (POST /pause: %d): no consumer stops reading in this run", status)
		return false
	case status != http.StatusOK:
		s.fatalf("POST /pause to %s: %d %s", PodObserveSubscriber, status, body)
	}
	// No resume when the step fails: the pause ends by itself, and the
	// pod goes with the step's cleanup.
	return true
}

// resumeSubscriber has the observed subscriber read again (POST /resume).
func (s *stepRun) resumeSubscriber(ctx context.Context) {
	status, body, err := s.postProbe(ctx, PodObserveSubscriber, "/resume")
	if err != nil || status != http.StatusOK {
		s.fatalf("POST /resume to %s: %v %d %s", PodObserveSubscriber, err, status, body)
	}
}

// postProbe POSTs to a probe's stats port at its IP, and returns the
// answer's status and body.
func (s *stepRun) postProbe(ctx context.Context, name, pathAndQuery string) (int, string, error) {
	pod, err := s.c.pod(ctx, s.cfg.AppNamespace, name)
	if err != nil {
		return 0, "", err
	}
	return s.post(ctx, fmt.Sprintf("http://%s%s", netJoin(pod.Status.PodIP, ProbeStatsPort), pathAndQuery))
}

// post POSTs to url, printed as run, within podHTTPTimeout.
func (s *stepRun) post(ctx context.Context, url string) (int, string, error) {
	say("$ curl -X POST %s", url)
	ctx, cancel := context.WithTimeout(ctx, podHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := s.c.http.Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(bytes.TrimSpace(b)), nil
}

// slowSpamFilter sets how long spam-filter takes for each message (its
// control port's POST /slow?delay=), at its IP.
func (s *stepRun) slowSpamFilter(ctx context.Context, pod *corev1.Pod, delay time.Duration) error {
	url := fmt.Sprintf("http://%s%s?delay=%s", netJoin(pod.Status.PodIP, DemoControlPort), demoapi.PathSlow, delay)
	status, body, err := s.post(ctx, url)
	if err != nil {
		return fmt.Errorf("making spam-filter take %s: %w", delay, err)
	}
	if status != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", url, status, body)
	}
	return nil
}
