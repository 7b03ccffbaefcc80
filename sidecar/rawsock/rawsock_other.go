//go:build !linux

package rawsock

import "net"

// RawWriteLimit and RawReadLimit: no write or read is raw here.
const (
	RawWriteLimit = 0
	RawReadLimit  = 0
)

// Reader reads with net.Conn here.
type Reader struct{ conn net.Conn }

// NewReader reads conn with conn.Read.
func NewReader(conn net.Conn) *Reader { return &Reader{conn: conn} }

// Raw says whether reads are raw system calls: never here.
func (r *Reader) Raw() bool { return false }

// Read is conn.Read.
func (r *Reader) Read(p []byte) (int, error) { return r.conn.Read(p) }

// Writer writes nothing here: every write is the caller's, with net.Conn.
type Writer struct{}

// NewWriter returns nil here.
func NewWriter(net.Conn, int) *Writer { return nil }

// WriteNow writes nothing.
func (*Writer) WriteNow([][]byte) int { return 0 }
