package sidecarapp

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
)

// TestSidecarReportFlags: -report-interval is documented, a value below a
// second or negative stops the sidecar at once naming the flag, and reports
// to the operator need the pod's UID.
func TestSidecarReportFlags(t *testing.T) {
	usage, err := command("-h").CombinedOutput()
	if err != nil {
		t.Fatalf("sidecar -h: %v\n%s", err, usage)
	}
	if !strings.Contains(string(usage), "-report-interval duration") || !strings.Contains(string(usage), "0 sends no reports (default 10s)") {
		t.Errorf("sidecar -h does not document -report-interval and its default:\n%s", usage)
	}

	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Everything the sidecar needs up to its reports; the broker is not
	// there, which the sidecar tolerates.
	base := []string{"-token-file", token, "-broker", "nats://" + natstest.FreeAddr(t), "-listen", natstest.FreeAddr(t),
		"-metrics-listen", "", "-health-listen", "", "-operator", natstest.FreeAddr(t), "-pod-name", "app-0", "-pod-namespace", "default"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"below a second", []string{"-pod-uid", "uid", "-report-interval", "500ms"}, "-report-interval 500ms is below the minimum of 1s"},
		{"negative", []string{"-pod-uid", "uid", "-report-interval", "-10s"}, "-report-interval -10s is negative"},
		{"no pod UID", nil, "-pod-uid is required to send reports"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := command(append(base, tc.args...)...)
			cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), runEnv + "=1"} // no $POD_UID
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
