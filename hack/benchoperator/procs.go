package main

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/weighstation/weighstation/hack/benchharness"
)

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
func (p *proc) cpu() (time.Duration, error) { return benchharness.ProcessCPU(p.pid()) }

// peakRSS is VmHWM, rss VmRSS, in bytes.
func (p *proc) peakRSS() (int64, error) { return benchharness.ProcessStatusBytes(p.pid(), "VmHWM:") }
func (p *proc) rss() (int64, error)     { return benchharness.ProcessStatusBytes(p.pid(), "VmRSS:") }

// metrics is one scrape of a Prometheus text endpoint: "name{labels}" -> value.
type metrics map[string]float64

func scrape(url string) (metrics, error) {
	m, err := benchharness.Scrape(url)
	return metrics(m), err
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
