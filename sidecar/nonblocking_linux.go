package sidecar

import (
	"syscall"
	"unsafe"
)

// nonBlockingWrites says whether nonBlockingWriter can write here.
const nonBlockingWrites = true

// nonBlockingWriter writes to a socket without blocking, one per
// connection (under writeMu). Its iovecs and its callback are made once,
// so that a write allocates nothing.
type nonBlockingWriter struct {
	raw     syscall.RawConn
	iov     [2*maxReferenced + 1]syscall.Iovec
	n       int // iovecs in use
	written int
	write   func(fd uintptr) bool
}

func newNonBlockingWriter(raw syscall.RawConn) *nonBlockingWriter {
	w := &nonBlockingWriter{raw: raw}
	w.write = func(fd uintptr) bool {
		r, _, errno := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.n))
		if errno == 0 {
			w.written = int(r)
		}
		// Done either way: the runtime must not wait for the socket to
		// become writable.
		return true
	}
	return w
}

// writeNow writes what it can of bufs at once, in one writev, and returns
// how many bytes that was: 0 when the socket's send buffer is full or the
// write failed (the writer goroutine's blocking write then meets the error
// and closes the connection). Go's sockets are non-blocking underneath.
func (w *nonBlockingWriter) writeNow(bufs [][]byte) int {
	w.n, w.written = 0, 0
	for _, b := range bufs {
		if len(b) > 0 && w.n < len(w.iov) {
			w.iov[w.n] = syscall.Iovec{Base: &b[0]}
			w.iov[w.n].SetLen(len(b))
			w.n++
		}
	}
	if w.n == 0 {
		return 0
	}
	err := w.raw.Write(w.write)
	clear(w.iov[:w.n]) // no payload kept alive by the scratch
	if err != nil {
		return 0
	}
	return w.written
}
