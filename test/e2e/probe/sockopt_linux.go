//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// smallSocket sets a pausable role's receive buffer (pauseRecvBuffer)
// before it connects: net.Dialer's Control.
func smallSocket(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if err := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, pauseRecvBuffer); err != nil {
			serr = fmt.Errorf("setting SO_RCVBUF to %d: %w", pauseRecvBuffer, err)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// tcpWmem is where the kernel says how large a TCP send buffer may grow
// (its third field), in the network namespace of the pod, which the
// sidecar shares.
const tcpWmem = "/proc/sys/net/ipv4/tcp_wmem"

// socketsHold is the most that c's socket and its peer's may hold: the
// peer's send buffer may grow to tcp_wmem's maximum, and this side's
// receive buffer is what the kernel says it is now (pauseRecvBuffer,
// doubled).
func socketsHold(c net.Conn) (int64, error) {
	b, err := os.ReadFile(tcpWmem)
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, fmt.Errorf("%s: %q, want three numbers", tcpWmem, b)
	}
	send, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", tcpWmem, err)
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, fmt.Errorf("a %T has no socket to ask", c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var recv int
	var serr error
	if err := raw.Control(func(fd uintptr) { recv, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF) }); err != nil {
		return 0, err
	}
	if serr != nil {
		return 0, fmt.Errorf("reading SO_RCVBUF: %w", serr)
	}
	return send + int64(recv), nil
}
