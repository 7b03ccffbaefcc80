package sidecarapp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
)

// endpoint is an HTTP endpoint of a command (metrics, probes). It is bound
// when the command starts, before anything is served, so that a busy or
// malformed address stops the command at once with an error naming its
// flag: bound later, in the background, the error would only be logged and
// the command would run on without the endpoint.
type endpoint struct {
	flag string
	ln   net.Listener
	srv  *http.Server
}

// bindEndpoint binds addr for -flag. An empty addr disables the endpoint:
// it returns nil, on which every method is a no-op.
func bindEndpoint(flag, addr string) (*endpoint, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-%s %s: %w", flag, addr, err)
	}
	return &endpoint{flag: flag, ln: ln}, nil
}

// serve serves h in the background until close.
func (e *endpoint) serve(h http.Handler, log logr.Logger) {
	if e == nil {
		return
	}
	e.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := e.srv.Serve(e.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(err, "endpoint stopped", "flag", "-"+e.flag)
		}
	}()
}

// addr is the bound address ("" when disabled), for the log.
func (e *endpoint) addr() string {
	if e == nil {
		return ""
	}
	return e.ln.Addr().String()
}

func (e *endpoint) close() {
	switch {
	case e == nil:
	case e.srv != nil:
		_ = e.srv.Close() // closes the listener too
	default:
		_ = e.ln.Close()
	}
}
