package benchharness

import (
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
)

// cleanups are what a signal or a failure must undo (processes, an
// apiserver), run newest first.
var (
	cleanupMu sync.Mutex
	cleanups  []func()
)

// AtExit registers f to run on SIGINT or SIGTERM (see CleanUpOnSignal) or
// RunCleanups, and returns it, made idempotent, for the caller to defer.
func AtExit(f func()) func() {
	once := sync.OnceFunc(f)
	cleanupMu.Lock()
	cleanups = append(cleanups, once)
	cleanupMu.Unlock()
	return once
}

// RunCleanups runs every registered cleanup, newest first.
func RunCleanups() {
	cleanupMu.Lock()
	fs := slices.Clone(cleanups)
	cleanupMu.Unlock()
	slices.Reverse(fs)
	for _, f := range fs {
		f()
	}
}

// CleanUpOnSignal runs the cleanups when the bench named name is
// interrupted, and exits.
func CleanUpOnSignal(name string) {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "%s: %s; cleaning up\n", name, sig)
		RunCleanups()
		os.Exit(130)
	}()
}
