package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// proc is one process of the bench, its output in a file (the operator
// logs every pod's configuration change: at 2,000 pods that is too much
// to keep in memory).
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan error
	exited  chan struct{}
}

func startProc(name, logPath, bin string, args ...string) (*proc, error) {
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, cmd: exec.Command(bin, args...), logPath: logPath, logFile: f, done: make(chan error, 1), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Its own process group: a ^C to the bench reaches the bench, which
	// stops it in order.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		err := p.cmd.Wait()
		f.Close()
		close(p.exited)
		p.done <- err
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// alive returns an error, with the end of its log, once the process exited.
func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited:\n%s", p.name, p.tail(30))
	default:
		return nil
	}
}

func (p *proc) tail(lines int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 1<<20 {
		b = b[len(b)-1<<20:]
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// stop sends SIGTERM and waits up to 15 s, then kills.
func (p *proc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// cpu is the process's CPU time so far, utime + stime (10 ms ticks).
func (p *proc) cpu() (time.Duration, error) { return cpuOf(p.pid()) }

func cpuOf(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %v %v", pid, err1, err2)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// peakRSS is VmHWM, rss VmRSS, in bytes.
func (p *proc) peakRSS() (int64, error) { return statusBytes(p.pid(), "VmHWM:") }
func (p *proc) rss() (int64, error)     { return statusBytes(p.pid(), "VmRSS:") }

func statusBytes(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// childrenNamed finds this process's children by command name (envtest
// starts kube-apiserver and etcd and does not export their pids).
func childrenNamed(names ...string) map[string]int {
	out := map[string]int{}
	dirs, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open {
			continue
		}
		f := strings.Fields(string(b[end+1:]))
		if len(f) < 2 || f[1] != self {
			continue
		}
		if comm := string(b[open+1 : end]); slices.Contains(names, comm) {
			out[comm] = pid
		}
	}
	return out
}

// metrics is one scrape of a Prometheus text endpoint: "name{labels}" -> value.
type metrics map[string]float64

func scrape(url string) (metrics, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping the operator's metrics: %w", err)
	}
	defer resp.Body.Close()
	out := metrics{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

var (
	reconcileTotal = regexp.MustCompile(`^controller_runtime_reconcile_total\{controller="([^"]+)",result="[^"]+"\}$`)
	queueDepth     = regexp.MustCompile(`^workqueue_depth\{.*\bname="([^"]+)".*\}$`)
	restRequests   = regexp.MustCompile(`^rest_client_requests_total\{code="([^"]+)",host="[^"]*",method="([^"]+)"\}$`)
)

// reconciles sums controller_runtime_reconcile_total by controller.
func (m metrics) reconciles() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := reconcileTotal.FindStringSubmatch(k); g != nil {
			out[g[1]] += v
		}
	}
	return out
}

// queueDepth is each controller's work queue depth.
func (m metrics) queueDepth() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := queueDepth.FindStringSubmatch(k); g != nil {
			out[g[1]] += v
		}
	}
	return out
}

// requests sums the operator's requests to the apiserver by method.
func (m metrics) requests() map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if g := restRequests.FindStringSubmatch(k); g != nil {
			out[g[2]] += v
		}
	}
	return out
}

func diff(after, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func total(m map[string]float64) float64 {
	var t float64
	for _, v := range m {
		t += v
	}
	return t
}

// cleanups are what a signal or a failure must undo: the processes and the
// apiserver, newest first.
var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// atExit registers f to run on SIGINT or SIGTERM and returns it, made
// idempotent, for the caller to defer.
func atExit(f func()) func() {
	once := sync.OnceFunc(f)
	cleanupMu.Lock()
	cleanups = append(cleanups, once)
	cleanupMu.Unlock()
	return once
}

func runCleanups() {
	cleanupMu.Lock()
	fs := slices.Clone(cleanups)
	cleanupMu.Unlock()
	slices.Reverse(fs)
	for _, f := range fs {
		f()
	}
}

func cleanUpOnSignal() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "bench-operator: %s; cleaning up\n", sig)
		runCleanups()
		os.Exit(130)
	}()
}
