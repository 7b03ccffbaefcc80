package sidecarapp

import (
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
)

// TestStandaloneSidecarSaysWhatItsDefaultsAllow: without -config and
// -operator, the sidecar logs at start that applications may subscribe to
// their inboxes only, and how to change that; on SIGTERM it drains, logs
// what it delivered and lost, and exits 0.
func TestStandaloneSidecarSaysWhatItsDefaultsAllow(t *testing.T) {
	sidecarAddr := natstest.FreeAddr(t)
	side := run(t, "-listen", sidecarAddr, "-broker", "nats://"+natstest.FreeAddr(t), "-token-file", tokenFile(t),
		"-metrics-listen", "", "-health-listen", "")
	eventually(t, 30*time.Second, "the sidecar serves", func() error {
		if !strings.Contains(side.Logs(), `"msg":"serving"`) {
			return errors.New("no serving line yet")
		}
		return nil
	})
	logs, err := side.StopAndWait(t, 30*time.Second)
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
			cmd := command(append([]string{"-listen", natstest.FreeAddr(t), "-broker", "nats://" + natstest.FreeAddr(t), "-token-file", token}, tc.args...)...)
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
