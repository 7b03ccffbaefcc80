package system_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/proctest"
)

// previousReleaseCommit is the last commit of configuration schema 1: the
// sidecars of the release before schema 2 run what it builds, and the
// operator must keep serving them while a rolling upgrade replaces them.
// There are no release tags, so the commit is pinned here. Bump it (and
// check previousSidecarArgs against that commit's internal/sidecarcmd)
// when a later release changes the schema again: the commit is then the
// last one of the schema before it.
const previousReleaseCommit = "26b4d87"

// previousReleasePackage is the previous release's sidecar as pods run
// it: the webhook injects /weighstation-sidecar, cmd/weighstation-sidecar,
// which runs the same code and flags as `weighstation sidecar`
// (internal/sidecarcmd) without the operator's Kubernetes libraries (it
// also builds in a third of the time).
const previousReleasePackage = "./cmd/weighstation-sidecar"

// previousReleaseBuildTimeout bounds the build: a cold Go build cache
// compiles the sidecar's dependencies too.
const previousReleaseBuildTimeout = 5 * time.Minute

// previousRelease is the previous release's sidecar binary, built once and
// shared by the tests that run while it exists: the first caller builds
// it, the last one to finish removes it (this package has no TestMain of
// its own to remove it at exit, and a binary left in the temporary
// directory at every run would pile up).
var previousRelease struct {
	mu    sync.Mutex
	users int
	dir   string // removed when users drops to 0
	bin   string
}

// previousReleaseSidecar returns the path of the sidecar binary built from
// previousReleaseCommit, building it first if no running test holds it.
func previousReleaseSidecar(t *testing.T) string {
	t.Helper()
	p := &previousRelease
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.users == 0 {
		dir, err := os.MkdirTemp("", "weighstation-previous-release-")
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		bin, err := buildPreviousRelease(dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			t.Fatal(err)
		}
		t.Logf("built the previous release's sidecar (%s of commit %s) in %s", previousReleasePackage, previousReleaseCommit, time.Since(start).Round(time.Millisecond))
		p.dir, p.bin = dir, bin
	}
	p.users++
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.users--; p.users == 0 {
			_ = os.RemoveAll(p.dir)
			p.dir, p.bin = "", ""
		}
	})
	return p.bin
}

// buildPreviousRelease extracts previousReleaseCommit's tree from this
// clone's history into dir/src (git archive: no worktree to register or
// remove) and builds previousReleasePackage there, into dir. The build
// uses this process's Go toolchain, module cache and GOFLAGS: that
// commit's go.mod needs the modules the current tree's tests were built
// with, so it needs no network once they are cached. -trimpath keeps
// the source directory out of the build's cache keys, so that the next
// run, from another temporary directory, finds its packages compiled.
func buildPreviousRelease(dir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), previousReleaseBuildTimeout)
	defer cancel()
	run := func(workdir, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = workdir
		// A go.work above the extracted tree must not pull in the
		// current tree's modules.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (not done within %s)", err, previousReleaseBuildTimeout)
		}
		return string(bytes.TrimSpace(out)), err
	}
	root, err := run(".", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return "", fmt.Errorf("this test builds the previous release's sidecar from the git history, and needs a git clone: git rev-parse --show-toplevel: %v\n%s", err, root)
	}
	if out, err := run(root, "git", "cat-file", "-e", previousReleaseCommit+"^{commit}"); err != nil {
		return "", fmt.Errorf("this test needs the history of the previous release: commit %s (previousReleaseCommit, the last of configuration schema 1) is not in the clone at %s; "+
			"a shallow clone lacks it (git fetch --unshallow, or a checkout with fetch-depth: 0): %v\n%s", previousReleaseCommit, root, err, out)
	}
	archive, src := filepath.Join(dir, "src.tar"), filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	if out, err := run(root, "git", "archive", "--format=tar", "-o", archive, previousReleaseCommit); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", previousReleaseCommit, err, out)
	}
	if out, err := run(src, "tar", "-x", "-f", archive); err != nil {
		return "", fmt.Errorf("extracting %s: %v\n%s", archive, err, out)
	}
	bin := filepath.Join(dir, "weighstation-sidecar-prev")
	if out, err := run(src, "go", "build", "-trimpath", "-buildvcs=false", "-o", bin, previousReleasePackage); err != nil {
		return "", fmt.Errorf("building the previous release's sidecar (go build %s at commit %s): %v\n%s", previousReleasePackage, previousReleaseCommit, err, out)
	}
	// Only the binary is needed from here on.
	_ = os.RemoveAll(src)
	_ = os.Remove(archive)
	return bin, nil
}

// previousSidecarFlags are what a pod's sidecar of the previous release is
// started with, as its flags were at previousReleaseCommit
// (internal/sidecarcmd/sidecarcmd.go there).
type previousSidecarFlags struct {
	listen, health      string // host:port on loopback
	brokerURL           string
	operator            string // the xDS address, host:port
	operatorServerName  string // the name the operator's certificate carries
	caFile, tokenFile   string
	namespace, pod, uid string
}

func (f previousSidecarFlags) args() []string {
	return []string{
		"-listen", f.listen,
		"-health-listen", f.health,
		"-metrics-listen", "", // none: nothing here scrapes it
		"-broker", f.brokerURL, // no -token-file: it asks the operator for its broker credential
		"-operator", f.operator,
		"-operator-server-name", f.operatorServerName,
		"-ca-file", f.caFile,
		"-identity-token-file", f.tokenFile,
		"-pod-namespace", f.namespace,
		"-pod-name", f.pod,
		"-pod-uid", f.uid,
		// The reports every second, as the harness's sidecars send them.
		"-report-interval", reportInterval.String(),
		// A short drain, and time for the operator to acknowledge the
		// last report when the test stops it.
		"-drain-grace", "1s",
		"-final-report-timeout", "10s",
		"-zap-encoder", "console",
	}
}

// previousSidecar is a running sidecar process of the previous release.
type previousSidecar struct {
	proc   *proctest.Process
	flags  previousSidecarFlags
	exited chan struct{} // closed once the process exited
	err    error         // its exit error, once exited is closed
}

// startPreviousSidecar runs the previous release's sidecar binary with
// flags until the test ends: it is stopped with SIGTERM (killed if it does
// not exit in time), and its output is logged if the test failed.
func startPreviousSidecar(t *testing.T, bin string, flags previousSidecarFlags) *previousSidecar {
	t.Helper()
	s := &previousSidecar{flags: flags, exited: make(chan struct{})}
	s.proc = proctest.Start(t, exec.Command(bin, flags.args()...))
	go func() { s.err = <-s.proc.Exited(); close(s.exited) }()
	t.Cleanup(func() {
		if err := s.stop(30 * time.Second); err != nil {
			t.Errorf("the previous release's sidecar: %v", err)
		}
		if t.Failed() {
			t.Logf("the previous release's sidecar (%s) wrote:\n%s", previousReleaseCommit, s.proc.Logs())
		}
	})
	return s
}

// alive fails if the process has exited: a wait for what it should do then
// says why at once, instead of at its timeout.
func (s *previousSidecar) alive() error {
	select {
	case <-s.exited:
		return fmt.Errorf("the previous release's sidecar exited (%v):\n%s", s.err, s.proc.Logs())
	default:
		return nil
	}
}

// stop sends SIGTERM, as the kubelet stops a container, and waits up to
// within for the process to exit, then kills it. It returns the exit error,
// or why it had to be killed.
func (s *previousSidecar) stop(within time.Duration) error {
	select {
	case <-s.exited:
		return s.err
	default:
	}
	if err := s.proc.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-s.exited:
		return s.err
	case <-time.After(within):
		_ = s.proc.Cmd.Process.Kill()
		<-s.exited
		return fmt.Errorf("did not exit within %s of SIGTERM; killed", within)
	}
}

// logsContain reports whether the process wrote want.
func (s *previousSidecar) logsContain(want string) bool {
	return strings.Contains(s.proc.Logs(), want)
}
