package sidecarapp

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
)

// TestInvalidLimitFlagsStopTheSidecar: a value the sidecar cannot run with
// stops it at start, with status 1 and an error that names the flag
// (before, -reload-interval 0 started the sidecar, which then panicked in
// its file watcher, and -max-connections 0 was refused with a dump of the
// sidecar's options that never named the flag).
func TestInvalidLimitFlagsStopTheSidecar(t *testing.T) {
	token := tokenFile(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"zero reload interval", []string{"-config", "../../../config/samples/sidecar/sidecar-config.yaml", "-reload-interval", "0s"}, "-reload-interval must be positive"},
		{"negative reload interval", []string{"-config", "../../../config/samples/sidecar/sidecar-config.yaml", "-reload-interval", "-1s"}, "-reload-interval must be positive"},
		{"zero connections", []string{"-max-connections", "0"}, "-max-connections must be at least 1, got 0"},
		{"zero memory budget", []string{"-memory-budget", "0"}, "-memory-budget must be at least 1 byte, got 0"},
		{"negative drain grace", []string{"-drain-grace", "-1s"}, "-drain-grace must not be negative"},
		{"negative send buffer", []string{"-app-send-buffer", "-1"}, "-app-send-buffer must be 0"},
		{"negative read budget wait", []string{"-read-budget-wait", "-1ms"}, "-read-budget-wait must not be negative"},
		{"go memory limit with a unit", []string{"-go-memory-limit", "96Mi"}, "-go-memory-limit must be auto, off or a number of bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := command(append([]string{"-listen", natstest.FreeAddr(t), "-broker", "nats://" + natstest.FreeAddr(t), "-token-file", token,
				"-metrics-listen", "", "-health-listen", ""}, tc.args...)...)
			cmd = exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
			cmd.Env = append(cmd.Env, command().Env...)
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), tc.want) {
				t.Fatalf("exited with %v, want status 1 and an error saying %q:\n%.600s", err, tc.want, out)
			}
		})
	}
}
