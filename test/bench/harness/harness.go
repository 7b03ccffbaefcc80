// Package benchharness runs weighstation's processes for the end-to-end
// benchmarks (test/bench/sidecar, test/bench/overload): a broker and
// sidecars as separate processes, the load generator as another, and the
// processes' own accounting (CPU time, peak memory) from /proc; and, for
// the operator's benchmarks (test/bench/operator, test/bench/reports), the
// operator as its own process (StartOperator) and what they share beside
// it (Poll, Progress; kubeenv for the apiserver).
package benchharness

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/proctest"
	"github.com/weighstation/weighstation/loadgen"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's times.
const clockTicks = 100

// Proc is one running process.
type Proc struct {
	Name string
	cmd  *exec.Cmd
	log  *proctest.LockedBuffer
	done chan error
}

// Start runs bin with args as a named process.
func Start(name, bin string, args ...string) (*Proc, error) {
	p := &Proc{Name: name, cmd: exec.Command(bin, args...), log: &proctest.LockedBuffer{}, done: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Log is what the process printed.
func (p *Proc) Log() string { return p.log.String() }

// CPU is the process's CPU time so far, user plus system (10 ms
// resolution).
func (p *Proc) CPU() (time.Duration, error) {
	d, err := ProcessCPU(p.Pid())
	if err != nil {
		return 0, fmt.Errorf("reading %s's CPU time: %w", p.Name, err)
	}
	return d, nil
}

// PeakRSS is the process's peak resident memory (VmHWM), in bytes.
func (p *Proc) PeakRSS() (int64, error) { return ProcessStatusBytes(p.Pid(), "VmHWM:") }

// RSS is the process's resident memory now (VmRSS), in bytes.
func (p *Proc) RSS() (int64, error) { return ProcessStatusBytes(p.Pid(), "VmRSS:") }

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (p *Proc) Stop() {
	SignalAndWait(p.cmd.Process, syscall.SIGTERM, p.done, 10*time.Second)
}

// FreeAddr returns a free 127.0.0.1 address.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitNATS waits until a NATS server answers at url.
func WaitNATS(url string, opts ...nats.Option) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		nc, err := nats.Connect(url, opts...)
		if err == nil {
			nc.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 20 s: %w", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// PassThroughPodConfig is the pod configuration of the benchmarks that
// measure the data path (bench-sidecar, profile-sidecar): every subject
// allowed and stamped, and one essential Subscription, "bench", over
// "bench.>", with queues deep enough that the load never drops, all
// enforced.
const PassThroughPodConfig = `
version: bench
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics: []
subscriptions:
- {name: bench, subject: "bench.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 33554432, overflow: DropNewest}}
access: {mode: enforce}
`

// Mesh is a broker and sidecars, each its own process.
type Mesh struct {
	Dir       string
	TokenFile string
	Broker    *Proc
	BrokerURL string
	Sidecars  []*Proc
	// SidecarURLs and MetricsURLs are the sidecars' client and /metrics
	// addresses.
	SidecarURLs, MetricsURLs []string

	configFile string // the pod configuration every sidecar reads
}

// Binaries are what a mesh runs.
type Binaries struct {
	// Weighstation is the whole binary: it runs the broker, and the
	// sidecars as `weighstation sidecar` unless Sidecar is set.
	Weighstation string
	// Sidecar is weighstation-sidecar, the binary the webhook injects;
	// empty: the sidecars run as `weighstation sidecar`.
	Sidecar string
}

// SidecarName names the sidecars' binary for a report.
func (b Binaries) SidecarName() string {
	if b.Sidecar != "" {
		return filepath.Base(b.Sidecar) + " (the injected binary)"
	}
	return "`weighstation sidecar` (the whole binary)"
}

// sidecarCommand is the binary and the first arguments of a sidecar.
func (b Binaries) sidecarCommand() (string, []string) {
	if b.Sidecar != "" {
		return b.Sidecar, nil
	}
	return b.Weighstation, []string{"sidecar"}
}

// StartMesh starts a broker and n sidecars with the given pod
// configuration (YAML) and extra sidecar flags.
func StartMesh(bins Binaries, n int, podConfig string, sidecarArgs ...string) (*Mesh, error) {
	bin := bins.Weighstation
	dir, err := os.MkdirTemp("", "weighstation-bench-")
	if err != nil {
		return nil, err
	}
	m := &Mesh{Dir: dir, TokenFile: filepath.Join(dir, "token")}
	if err := os.WriteFile(m.TokenFile, []byte("bench-token\n"), 0o600); err != nil {
		return nil, err
	}
	configFile := filepath.Join(dir, "pod.yaml")
	if err := os.WriteFile(configFile, []byte(podConfig), 0o600); err != nil {
		return nil, err
	}
	brokerAddr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	m.BrokerURL = "nats://" + brokerAddr
	if m.Broker, err = Start("broker", bin, "broker", "-listen", brokerAddr, "-token-file", m.TokenFile); err != nil {
		return nil, err
	}
	if err := WaitNATS(m.BrokerURL, nats.Token("bench-token")); err != nil {
		m.Stop()
		return nil, fmt.Errorf("%w\n%s", err, m.Broker.Log())
	}
	m.configFile = configFile
	for range n {
		if err := m.AddSidecar(bins, sidecarArgs...); err != nil {
			m.Stop()
			return nil, err
		}
	}
	return m, nil
}

// AddSidecar starts one more sidecar on the mesh's broker and pod
// configuration, with extra flags of its own (a variant to compare).
func (m *Mesh) AddSidecar(bins Binaries, sidecarArgs ...string) error {
	addr, err1 := FreeAddr()
	metrics, err2 := FreeAddr()
	if err1 != nil || err2 != nil {
		return fmt.Errorf("finding free ports: %v %v", err1, err2)
	}
	// No probes (several sidecars would share -health-listen's default
	// port, which stops them now), and no drain at the end of a run.
	sidecarBin, args := bins.sidecarCommand()
	args = append(args, "-listen", addr, "-broker", m.BrokerURL, "-token-file", m.TokenFile, "-config", m.configFile, "-metrics-listen", metrics,
		"-health-listen", "", "-drain-grace", "0")
	args = append(args, sidecarArgs...)
	p, err := Start(fmt.Sprintf("sidecar-%c", 'a'+len(m.Sidecars)), sidecarBin, args...)
	if err != nil {
		return err
	}
	m.Sidecars = append(m.Sidecars, p)
	m.SidecarURLs = append(m.SidecarURLs, "nats://"+addr)
	m.MetricsURLs = append(m.MetricsURLs, "http://"+metrics+"/metrics")
	if err := WaitNATS("nats://" + addr); err != nil {
		return fmt.Errorf("%w\n%s", err, p.Log())
	}
	return nil
}

// Stop stops every process and removes the directory.
func (m *Mesh) Stop() {
	for _, p := range m.Sidecars {
		p.Stop()
	}
	if m.Broker != nil {
		m.Broker.Stop()
	}
	_ = os.RemoveAll(m.Dir)
}

// Bench runs `weighstation bench -json` with args as its own process and
// returns its summary.
func Bench(bin string, args ...string) (*loadgen.Summary, error) {
	cmd := exec.Command(bin, append([]string{"bench", "-json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("weighstation bench %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	var s loadgen.Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		return nil, fmt.Errorf("decoding the bench summary: %w", err)
	}
	return &s, nil
}

// CPUs reads several processes' CPU times at once.
func CPUs(procs ...*Proc) ([]time.Duration, error) {
	out := make([]time.Duration, len(procs))
	for i, p := range procs {
		d, err := p.CPU()
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// SidecarIP is the loopback address a benchmark's simulated sidecar i
// dials the operator from (xdsclient.Options.LocalAddr), its own as a
// pod's IP is: the operator's per-peer limits (-xds-tokenreview-peer-rate)
// would otherwise take every simulated sidecar for one peer. Linux routes
// all of 127.0.0.0/8 to lo; 250 per /24 keeps clear of .0 and .255.
func SidecarIP(i int) net.IP { return net.IPv4(127, 1, byte(i/250), byte(i%250+1)) }
