package sidecarapp

import (
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/poll"

	"github.com/weighstation/weighstation/internal/proctest"
)

// runEnv, set in a child's environment, makes the test binary the sidecar:
// the tests run Run in processes of its own (it reads signals and exits),
// built with the test's flags (-race included), without building a binary.
const runEnv = "SIDECARAPP_TEST_RUN"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) != "" {
		// As cmd/weighstation-sidecar's main.
		if err := Run(os.Args[1:]); err != nil {
			fmt.Fprintf(os.Stderr, "weighstation-sidecar: %v\n", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// command is the sidecar with args, as a process.
func command(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), runEnv+"=1")
	return cmd
}

// tokenFile writes a broker token for a test.
func tokenFile(t *testing.T) string { return proctest.TokenFile(t, "s3cret") }

// run starts the sidecar with args, as a process.
func run(t *testing.T, args ...string) *proctest.Process { return proctest.Start(t, command(args...)) }

// eventually polls check every 100 ms until it returns nil, and fails the
// test with its last error after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	if err := poll.Until(timeout, 100*time.Millisecond, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
