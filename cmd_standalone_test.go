package main

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
)

// tokenFile writes a broker token for a test.
func tokenFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// running is the binary, started by run with args; stopAndWait sends it
// SIGTERM and returns everything it logged and its exit error.
type running struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error
}

func run(t *testing.T, args ...string) *running {
	t.Helper()
	r := &running{cmd: exec.Command(buildBinary(t), args...), logs: &lockedBuffer{}, exited: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
		}
	})
	return r
}

func (r *running) stopAndWait(t *testing.T) (string, error) {
	t.Helper()
	if err := r.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r.exited:
		return r.logs.String(), err
	case <-time.After(30 * time.Second):
		t.Fatalf("weighstation %s did not stop within 30s of SIGTERM:\n%s", r.cmd.Args[1], r.logs)
		return "", nil
	}
}

// TestStandaloneSidecarSaysWhatItsDefaultsAllow: without -config and
// -operator, the sidecar logs at start that applications may subscribe to
// their inboxes only, and how to change that; on SIGTERM it drains, logs
// what it delivered and lost, and exits 0.
func TestStandaloneSidecarSaysWhatItsDefaultsAllow(t *testing.T) {
	sidecarAddr := natstest.FreeAddr(t)
	side := run(t, "sidecar", "-listen", sidecarAddr, "-broker", "nats://"+natstest.FreeAddr(t), "-token-file", tokenFile(t),
		"-metrics-listen", "", "-health-listen", "")
	waitForWithin(t, 30*time.Second, "the sidecar serves", func() error {
		if !strings.Contains(side.logs.String(), `"msg":"serving"`) {
			return errors.New("no serving line yet")
		}
		return nil
	})
	logs, err := side.stopAndWait(t)
	if err != nil {
		t.Fatalf("exited with %v after SIGTERM, want 0:\n%s", err, logs)
	}
	defaults := lineWith(logs, "no -config and no -operator")
	for _, want := range []string{"subscribe ONLY to their own inboxes (_INBOX.<token>.>)", "Permissions Violation", "-config FILE", "-operator ADDRESS",
		"config/samples/sidecar/sidecar-config.yaml", `"maxMessageBytes":1048576`} {
		if !strings.Contains(defaults, want) {
			t.Errorf("the defaults line does not say %q:\n%s", want, logs)
		}
	}
	if stopped := lineWith(logs, `"msg":"stopped`); !strings.Contains(stopped, `"drained":true`) || !strings.Contains(stopped, `"undelivered":0`) {
		t.Errorf("no summary of the drain:\n%s", logs)
	}
}

// lineWith is the first line of logs that contains s, or "".
func lineWith(logs, s string) string {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}

// TestEndpointsOnABusyPortStopTheSidecar: an address the sidecar cannot
// listen on stops it at start, with status 1 and the flag's name, instead
// of leaving it running without the endpoint.
func TestEndpointsOnABusyPortStopTheSidecar(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"metrics", []string{"-metrics-listen", busy.Addr().String(), "-health-listen", ""}, "-metrics-listen " + busy.Addr().String() + ": listen tcp"},
		{"health", []string{"-health-listen", busy.Addr().String(), "-metrics-listen", ""}, "-health-listen " + busy.Addr().String() + ": listen tcp"},
		{"a malformed address", []string{"-metrics-listen", "127.0.0.1", "-health-listen", ""}, "-metrics-listen 127.0.0.1: listen tcp"},
		{"the application's", []string{"-listen", busy.Addr().String(), "-metrics-listen", "", "-health-listen", ""}, "-listen: listening on " + busy.Addr().String()},
	}
	token := tokenFile(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"sidecar", "-listen", natstest.FreeAddr(t), "-broker", "nats://" + natstest.FreeAddr(t), "-token-file", token}, tc.args...)
			cmd := exec.Command(buildBinary(t), args...)
			cmd.WaitDelay = 30 * time.Second
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exited with %v, want status 1:\n%s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not say %q:\n%s", tc.want, out)
			}
		})
	}
}

// TestBrokerLogsLikeTheOtherCommands: the broker's lines, nats-server's
// included, are JSON by default, as the operator's and the sidecar's are,
// and -zap-encoder chooses another format for all of them alike.
func TestBrokerLogsLikeTheOtherCommands(t *testing.T) {
	tests := []struct {
		name string
		args []string
		json bool
	}{
		{"by default", nil, true},
		{"console", []string{"-zap-encoder", "console"}, false},
	}
	token := tokenFile(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := natstest.FreeAddr(t)
			broker := run(t, append([]string{"broker", "-listen", addr, "-token-file", token}, tc.args...)...)
			waitForWithin(t, 30*time.Second, "the broker serves", func() error {
				nc, err := nats.Connect("nats://"+addr, nats.Token("s3cret"))
				if err == nil {
					nc.Close()
				}
				return err
			})
			logs, err := broker.stopAndWait(t)
			if err != nil {
				t.Fatalf("exited with %v after SIGTERM, want 0:\n%s", err, logs)
			}
			natsLines := 0
			for line := range strings.Lines(logs) {
				var entry struct{ Level, Logger, Msg string }
				isJSON := json.Unmarshal([]byte(line), &entry) == nil
				if isJSON != tc.json {
					t.Fatalf("a line is JSON: %t, want %t: %q", isJSON, tc.json, line)
				}
				if strings.Contains(line, "broker.nats") {
					natsLines++
				}
				if isJSON && (entry.Level == "" || entry.Logger == "" || entry.Msg == "") {
					t.Errorf("a line without level, logger or message: %q", line)
				}
			}
			if natsLines == 0 || !strings.Contains(logs, "Server is ready") {
				t.Fatalf("no nats-server line under the logger broker.nats:\n%s", logs)
			}
		})
	}
	usage, err := exec.Command(buildBinary(t), "broker", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("broker -h: %v\n%s", err, usage)
	}
	if _, logging, found := strings.Cut(string(usage), "\nLogging:\n"); !found || !strings.Contains(logging, "-zap-encoder") {
		t.Errorf("broker -h does not list the logging flags apart:\n%s", usage)
	}
}
