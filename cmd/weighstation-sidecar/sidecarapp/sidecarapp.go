// Package sidecarapp is the one place a sidecar is assembled, as
// cert-manager's cmd/<binary>/app: its flags (Options, AddFlags,
// Validate), its assembly and start (New: endpoints bound first, the
// broker connection, the server, the configuration from the operator, a
// file or the defaults), its drain (Sidecar.Shutdown), and the command line
// around them (Run), which both `weighstation sidecar` and the
// weighstation-sidecar binary run. Tests and benches build their sidecars
// in process with New, and swarms of simulated sidecars their
// operator-facing halves with NewOperatorLink, so that what they run is
// what a pod runs.
//
// It imports no Kubernetes package (cmd/weighstation-sidecar's test checks
// the whole binary): Go runs the init of every package a binary links, and
// the Kubernetes libraries' would cost every pod's sidecar their memory.
package sidecarapp

import (
	"context"
	"flag"
	"fmt"
	"os/signal"
	"syscall"

	"github.com/weighstation/weighstation/internal/version"
)

// Run runs the sidecar with the command line args (its flags), until
// SIGINT or SIGTERM, then drains what it holds and returns.
func Run(args []string) error {
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	opts := NewOptions()
	opts.AddFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version.String())
		return nil
	}
	if err := opts.Validate(); err != nil {
		return err
	}
	// The process's, so the command's alone: New leaves it to its caller.
	if _, err := applyGoMemoryLimit(opts.GoMemoryLimit, opts.Sidecar.MemoryBudget); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	s, err := New(ctx, *opts)
	if err != nil {
		return err
	}
	defer s.Close()
	<-ctx.Done()
	stop() // a second signal stops the process at once
	s.Shutdown()
	return nil
}
