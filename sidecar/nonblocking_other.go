//go:build !linux

package sidecar

import "syscall"

// nonBlockingWrites: every write is the connection's writer goroutine's.
const nonBlockingWrites = false

type nonBlockingWriter struct{}

func newNonBlockingWriter(syscall.RawConn) *nonBlockingWriter { return nil }

func (*nonBlockingWriter) writeNow([][]byte) int { return 0 }
