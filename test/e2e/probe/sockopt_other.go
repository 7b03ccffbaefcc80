//go:build !linux

package main

import (
	"errors"
	"net"
	"syscall"
)

// smallSocket leaves the socket as it is: the probe runs on Linux
// (sockopt_linux.go).
func smallSocket(_, _ string, _ syscall.RawConn) error { return nil }

// socketsHold is unknown off Linux: give fill=N instead of fill=auto.
func socketsHold(net.Conn) (int64, error) {
	return 0, errors.New("fill=auto needs Linux's tcp_wmem; give fill=N bytes")
}
