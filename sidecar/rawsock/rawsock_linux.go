package rawsock

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// RawWriteLimit is the largest write made as a raw system call; a larger
// one is made with syscall.Syscall, so that copying it into the socket
// never holds the goroutine's processor for long.
const RawWriteLimit = 64 << 10

// RawReadLimit is the most one raw read copies: a caller's buffer may be
// far larger (one whole frame of up to the broker's max_payload), and a
// raw call keeps the goroutine's processor until it returns. What is left
// in the socket is read by the next call.
const RawReadLimit = 256 << 10

// rawConn is conn's file descriptor, nil when it has none (TLS, a pipe).
func rawConn(conn net.Conn) syscall.RawConn {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// Reader reads a connection: one read(2) per Read, made raw.
type Reader struct {
	conn net.Conn
	raw  syscall.RawConn // nil: conn.Read
	// The callback's arguments and results, fields so that the callback is
	// made once and a read allocates nothing.
	p    []byte
	n    int
	err  error
	read func(fd uintptr) bool
}

// NewReader reads conn with raw system calls when it is a socket, and with
// conn.Read otherwise.
func NewReader(conn net.Conn) *Reader {
	r := &Reader{conn: conn}
	raw := rawConn(conn)
	if raw == nil {
		return r
	}
	r.raw = raw
	r.read = func(fd uintptr) bool {
		for {
			n, _, errno := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.p[0])), uintptr(len(r.p)))
			switch errno {
			case 0:
				r.n, r.err = int(n), nil
				if n == 0 {
					r.err = io.EOF
				}
				return true
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				return false // nothing to read: the runtime waits for the socket
			default:
				r.n, r.err = 0, &net.OpError{Op: "read", Net: conn.LocalAddr().Network(), Source: conn.LocalAddr(), Addr: conn.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
				return true
			}
		}
	}
	return r
}

// Raw says whether reads are raw system calls.
func (r *Reader) Raw() bool { return r.raw != nil }

// Read reads what the socket holds into p, waiting, within the
// connection's read deadline, until it holds something. The errors are
// net.Conn's: a deadline's is a net.Error whose Timeout is true, and the
// end of the stream is io.EOF.
func (r *Reader) Read(p []byte) (int, error) {
	if r.raw == nil {
		return r.conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	r.p = p[:min(len(p), RawReadLimit)]
	err := r.raw.Read(r.read)
	r.p = nil
	if err != nil {
		return 0, err // the deadline passed, or the connection was closed
	}
	return r.n, r.err
}

// Writer writes to a socket without blocking: one writev(2) per WriteNow,
// with an iovec array made once, so that a write allocates nothing. Not
// safe for concurrent use.
type Writer struct {
	raw     syscall.RawConn
	iov     []syscall.Iovec
	n       int // iovecs in use
	bytes   int // bytes they hold
	written int
	write   func(fd uintptr) bool
}

// NewWriter returns a Writer of at most maxBuffers buffers per write, or
// nil when conn is not a socket.
func NewWriter(conn net.Conn, maxBuffers int) *Writer {
	raw := rawConn(conn)
	if raw == nil {
		return nil
	}
	w := &Writer{raw: raw, iov: make([]syscall.Iovec, maxBuffers)}
	w.write = func(fd uintptr) bool {
		var r uintptr
		var errno syscall.Errno
		if w.bytes <= RawWriteLimit {
			r, _, errno = syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.n))
		} else {
			r, _, errno = syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.n))
		}
		if errno == 0 {
			w.written = int(r)
		}
		// Done either way: the runtime must not wait for the socket to
		// become writable.
		return true
	}
	return w
}

// WriteNow writes what it can of bufs at once, in one writev of at most
// its maxBuffers first non-empty buffers, and returns how many bytes that
// was: 0 when the socket's send buffer is full or the write failed (the
// caller's blocking write then meets the error).
func (w *Writer) WriteNow(bufs [][]byte) int {
	w.n, w.bytes, w.written = 0, 0, 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		if w.n == len(w.iov) {
			break
		}
		w.iov[w.n] = syscall.Iovec{Base: &b[0]}
		w.iov[w.n].SetLen(len(b))
		w.n++
		w.bytes += len(b)
	}
	if w.n == 0 {
		return 0
	}
	err := w.raw.Write(w.write)
	clear(w.iov[:w.n]) // no buffer kept alive by the scratch
	if err != nil {
		return 0
	}
	return w.written
}
