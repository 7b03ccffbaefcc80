package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/poll"
	"github.com/weighstation/weighstation/internal/proctest"
	"github.com/weighstation/weighstation/sidecar"
	"github.com/weighstation/weighstation/test/bench/harness"
)

// The hostile publisher of issue 30: one pod's MaxConnections (256)
// connections, each announcing a body of the sidecar's largest payload (1
// MiB) and sending all of it but its last byte, so that every connection
// holds a body in progress at once; then the last bytes and a PING each.
const (
	hostileConnections = 256
	hostileBody        = 1 << 20
	// containerLimit is the chart's sidecar memory limit
	// (charts/weighstation/values.yaml, sidecar.resources.limits.memory;
	// webhook.DefaultResources).
	containerLimit = 128 << 20
)

// TestHostileLargeBodiesStayUnderTheContainerLimit runs the built binary
// with the chart's flags (the defaults: -memory-budget 64 MiB, 256
// connections) as a process of its own, so that its peak RSS (VmHWM) is
// its alone, and holds it under the container's memory limit while every
// connection announces a 1 MiB body. The broker takes 2 MiB messages, so
// that the sidecar's own payload limit (1 MiB) is the one in force. Each
// connection must get its PONG: a body over the read budget is refused, the
// connection kept.
func TestHostileLargeBodiesStayUnderTheContainerLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sidecar and sends it 256 MiB")
	}
	bin := filepath.Join(t.TempDir(), "weighstation-sidecar")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	const token = "s3cret"
	broker := natstest.StartBroker(t, &server.Options{Authorization: token, MaxPayload: 2 << 20})
	p := proctest.Start(t, exec.Command(bin, "-listen", "127.0.0.1:0", "-broker", broker.ClientURL(), "-token-file", proctest.TokenFile(t, token),
		"-health-listen", "", "-metrics-listen", ""))
	listen := servingAddr(t, p)

	body := bytes.Repeat([]byte("x"), hostileBody)
	type outcome struct {
		// refusals before the PONG: for want of memory (the read
		// budget), or by a Topic's limits (the default policy's 8
		// MiB/s), which the bodies met once read.
		memory, other int
		err           error
	}
	conns := make([]net.Conn, hostileConnections)
	readers := make([]*bufio.Reader, hostileConnections)
	var wg sync.WaitGroup
	errs := make([]error, hostileConnections)
	for i := range conns {
		wg.Go(func() {
			c, err := net.Dial("tcp", listen)
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { _ = c.Close() })
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			conns[i], readers[i] = c, bufio.NewReader(c)
			if line, err := readers[i].ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
				errs[i] = fmt.Errorf("INFO: %q, %v", line, err)
				return
			}
			head := fmt.Sprintf("CONNECT {\"verbose\":false}\r\nPUB hostile.%d %d\r\n", i, hostileBody)
			if _, err := c.Write(append([]byte(head), body[:hostileBody-1]...)); err != nil {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("connection %d, announcing its body: %v", i, err)
		}
	}
	outcomes := make([]outcome, hostileConnections)
	for i, c := range conns {
		wg.Go(func() {
			if _, err := c.Write(append(body[hostileBody-1:], "\r\nPING\r\n"...)); err != nil {
				outcomes[i].err = err
				return
			}
			for {
				line, err := readers[i].ReadString('\n')
				switch {
				case err != nil:
					outcomes[i].err = fmt.Errorf("before its PONG: %w", err)
					return
				case strings.HasPrefix(line, "-ERR") && strings.Contains(line, "memory budget"):
					outcomes[i].memory++
				case strings.HasPrefix(line, "-ERR"):
					outcomes[i].other++
				case line == "PONG\r\n":
					return
				}
			}
		})
	}
	wg.Wait()
	hwm, rss := procMemory(t, p.Cmd.Process.Pid)
	memory, other := 0, 0
	for i, o := range outcomes {
		if o.err != nil {
			t.Errorf("connection %d: %v", i, o.err)
		}
		memory, other = memory+o.memory, other+o.other
	}
	t.Logf("%d connections x %d-byte bodies: peak RSS (VmHWM) %.1f MiB, RSS at the end %.1f MiB; bodies refused for want of memory %d, by the Topic's limits %d; "+
		"-memory-budget %d MiB, container limit %d MiB",
		hostileConnections, hostileBody, mib(hwm), mib(rss), memory, other, sidecar.DefaultOptions.MemoryBudget>>20, containerLimit>>20)
	if hwm >= containerLimit {
		t.Fatalf("peak RSS %.1f MiB, over the container limit of %d MiB\n%s", mib(hwm), containerLimit>>20, p.Logs())
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// servingAddr waits for the sidecar's "serving" log line and returns the
// address it listens on for applications.
func servingAddr(t *testing.T, p *proctest.Process) string {
	t.Helper()
	var addr string
	if err := poll.Until(30*time.Second, 20*time.Millisecond, func() error {
		for line := range strings.Lines(p.Logs()) {
			var entry struct{ Msg, Listen string }
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "serving" {
				addr = entry.Listen
				return nil
			}
		}
		return fmt.Errorf("no \"serving\" line yet")
	}); err != nil {
		t.Fatalf("the sidecar did not start: %v\n%s", err, p.Logs())
	}
	return addr
}

// procMemory reads a process's peak and current resident set (VmHWM,
// VmRSS), in bytes.
func procMemory(t *testing.T, pid int) (hwm, rss int64) {
	t.Helper()
	hwm, err := benchharness.ProcessStatusBytes(pid, "VmHWM:")
	if err != nil {
		t.Fatal(err)
	}
	if rss, err = benchharness.ProcessStatusBytes(pid, "VmRSS:"); err != nil {
		t.Fatal(err)
	}
	return hwm, rss
}
