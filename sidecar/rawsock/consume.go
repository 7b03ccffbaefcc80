package rawsock

import "net"

// Consume drops the first n bytes of bufs, what a write took: the buffers
// written whole are dropped (and cleared, so that the slice keeps none of
// them alive) and the first one left is cut.
func Consume(bufs *net.Buffers, n int) {
	for len(*bufs) > 0 && n >= len((*bufs)[0]) {
		n -= len((*bufs)[0])
		(*bufs)[0] = nil
		*bufs = (*bufs)[1:]
	}
	if len(*bufs) > 0 {
		(*bufs)[0] = (*bufs)[0][n:]
	}
}
