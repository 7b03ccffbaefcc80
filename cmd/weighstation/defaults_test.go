package main

import (
	"testing"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// The operator sizes injected sidecars from meshconfig's budget (it may not
// import the sidecar); the sidecar's own default must be that budget.
func TestTheInjectedBudgetIsTheSidecarDefault(t *testing.T) {
	if got, want := sidecar.DefaultOptions.MemoryBudget, int64(meshconfig.DefaultSidecarMemoryBudget); got != want {
		t.Fatalf("sidecar.DefaultOptions.MemoryBudget = %d, meshconfig.DefaultSidecarMemoryBudget = %d: the webhook sizes the sidecar's memory limit from the latter", got, want)
	}
}
