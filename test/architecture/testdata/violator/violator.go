// Package violator breaks every rule the architecture test enforces, so
// that the test can show it reports each break (TestTheCheckerFindsViolations).
// It lives under testdata: ./... skips it, and nothing imports it.
package violator

import (
	"context"

	"github.com/weighstation/weighstation/internal/natstest" // flagged: natstest
	"github.com/weighstation/weighstation/sidecar"           // flagged: imports github.com/weighstation/weighstation/sidecar
	"github.com/weighstation/weighstation/sidecar/upstream"  // flagged: sidecar/upstream
	"github.com/weighstation/weighstation/sidecar/xdsclient" // flagged: sidecar/xdsclient
)

// Client builds an xDS client by hand.
func Client() (*xdsclient.Client, error) {
	return xdsclient.New(xdsclient.Options{}) // flagged: xdsclient.New
}

// newSidecar holds the constructor as a value: a use all the same.
var newSidecar = sidecar.New // flagged: sidecar.New

// Sidecar calls the constructor through the value.
func Sidecar(up *upstream.Client) (*sidecar.Server, error) {
	return newSidecar(up, sidecar.DefaultOptions)
}

// builder has a method named New: not a constructor of the table.
type builder struct{}

func (builder) New(context.Context) {}

// Build uses the method and a helper, neither a constructor.
func Build(ctx context.Context) {
	builder{}.New(ctx)
	_ = natstest.StartBroker
}
