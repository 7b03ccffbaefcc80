// Package rawsock reads and writes a TCP socket with raw system calls made
// through the socket's syscall.RawConn, for the sidecar's two hot paths:
// the application's publishes and the broker's deliveries.
//
// Why not net.Conn. Go's sockets are non-blocking underneath, so a read or
// a write returns at once; net.Conn still makes each one with
// syscall.Syscall, which tells the scheduler that the goroutine is entering
// a system call that may block. When the process was idle between two
// messages (the usual case at a few thousand messages a second), the
// runtime's monitor thread is asleep, and entering a system call wakes it
// with a futex, a cost paid per message (docs/benchmarks.md). A raw
// system call (syscall.RawSyscall) skips that bookkeeping.
// Its cost is that the goroutine keeps its processor while the kernel
// works, which is right for a call that cannot block and is short: so a
// write of more than RawWriteLimit bytes goes through syscall.Syscall, as
// net.Conn would, and a read copies at most RawReadLimit (256 KiB), however
// large the caller's buffer.
//
// Waiting is left to the runtime: Reader's callback returns false when the
// socket has nothing to read, and syscall.RawConn.Read parks the goroutine
// on the network poller, with the connection's deadlines, as net.Conn.Read
// does.
//
// On other systems, and for connections without a file descriptor (TLS,
// net.Pipe), Reader reads with net.Conn and Writer writes nothing (its
// caller then writes with net.Conn).
package rawsock
