// Command sidecarrss measures the idle memory (VmRSS) of the sidecar run
// as `weighstation sidecar` and as weighstation-sidecar: the same code, but
// the first binary links the operator's Kubernetes libraries, whose package
// inits run in every process of it. Each round starts both, standalone on
// loopback ports with no broker, waits until /readyz answers and -settle
// more, reads VmRSS (and its parts: RssAnon, the heap and stacks; RssFile,
// the binary's pages) from /proc, and stops them; it prints each round and
// the medians.
//
//	go run ./test/bench/sidecarrss -bin-dir bin -rounds 5
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	binDir := flag.String("bin-dir", "bin", "the directory holding weighstation and weighstation-sidecar (make binaries, or make build)")
	rounds := flag.Int("rounds", 5, "rounds, each starting both binaries once, interleaved")
	settle := flag.Duration("settle", 2*time.Second, "how long after /readyz answers the memory is read")
	flag.Parse()
	if err := run(*binDir, *rounds, *settle); err != nil {
		fmt.Fprintf(os.Stderr, "sidecarrss: %v\n", err)
		os.Exit(1)
	}
}

type variant struct {
	name string
	argv []string
}

func run(binDir string, rounds int, settle time.Duration) error {
	dir, err := os.MkdirTemp("", "sidecarrss")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		return err
	}
	variants := []variant{
		{"weighstation sidecar", []string{filepath.Join(binDir, "weighstation"), "sidecar"}},
		{"weighstation-sidecar", []string{filepath.Join(binDir, "weighstation-sidecar")}},
	}
	// The sidecar's defaults but for the addresses: every port chosen by
	// the kernel, and a broker that refuses at once (no DNS lookups).
	flags := []string{"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-health-listen", "127.0.0.1:0",
		"-broker", "nats://127.0.0.1:1", "-token-file", token}
	samples := make([][]memory, len(variants))
	for r := range rounds {
		for i, v := range variants {
			m, err := measure(append(v.argv, flags...), settle)
			if err != nil {
				return fmt.Errorf("%s: %w", v.name, err)
			}
			samples[i] = append(samples[i], m)
			fmt.Printf("round %d  %-22s %s\n", r+1, v.name, m)
		}
	}
	fmt.Println()
	for i, v := range variants {
		var med memory
		for f := range med {
			med[f] = median(samples[i], f)
		}
		fmt.Printf("median   %-22s %s\n", v.name, med)
	}
	return nil
}

// memory is VmRSS, RssAnon and RssFile, in KiB.
type memory [3]int

var fields = [...]string{"VmRSS", "RssAnon", "RssFile"}

func (m memory) String() string {
	var b strings.Builder
	for f, kib := range m {
		fmt.Fprintf(&b, "%s %5.1f MiB  ", fields[f], float64(kib)/1024)
	}
	return strings.TrimSpace(b.String())
}

// measure starts argv, waits until it is ready and settle more, and
// returns its memory.
func measure(argv []string, settle time.Duration) (memory, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	logs, err := cmd.StderrPipe()
	if err != nil {
		return memory{}, err
	}
	if err := cmd.Start(); err != nil {
		return memory{}, err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	health, err := healthAddr(logs)
	if err != nil {
		return memory{}, err
	}
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + health + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			return memory{}, fmt.Errorf("not ready within 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(settle)
	return readMemory(cmd.Process.Pid)
}

// healthAddr reads the sidecar's log until its "serving" line, which names
// the address its probes are bound to.
func healthAddr(logs io.Reader) (string, error) {
	lines := bufio.NewScanner(logs)
	for lines.Scan() {
		var entry struct{ Msg, Health string }
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry.Msg == "serving" {
			return entry.Health, nil
		}
	}
	return "", errors.New("exited before serving")
}

func readMemory(pid int) (memory, error) {
	var m memory
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	found := 0
	for line := range strings.Lines(string(status)) {
		name, value, _ := strings.Cut(line, ":")
		if f := slices.Index(fields[:], name); f >= 0 {
			if _, err := fmt.Sscanf(strings.TrimSpace(value), "%d kB", &m[f]); err != nil {
				return m, fmt.Errorf("%s %q: %w", name, value, err)
			}
			found++
		}
	}
	if found != len(fields) {
		return m, fmt.Errorf("/proc/%d/status lacks one of %v", pid, fields)
	}
	return m, nil
}

func median(samples []memory, field int) int {
	var v []int
	for _, m := range samples {
		v = append(v, m[field])
	}
	slices.Sort(v)
	return v[len(v)/2]
}
