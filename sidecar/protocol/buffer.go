package protocol

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Buffer reads a NATS protocol stream so that frames are parsed where they
// were read: a control line and its body are slices of one buffer, valid
// until the next Consume, with no copy into a second one.
//
// Its memory is bounded and follows the load: it starts at its initial size
// (Initial), doubles while reads fill it, up to Streaming, and past that
// grows only to hold one frame that does not fit (at most Limit bytes:
// a control line and the largest body). After IdleReads reads that each
// used less than the initial size, it returns to that size, so that a
// burst of large messages does not hold memory for ever.
type Buffer struct {
	r          io.Reader
	buf        []byte
	start, end int
	sizes      BufferSizes
	idle       int  // consecutive small reads into a grown buffer
	filled     bool // the last read filled all the room it had
}

// BufferSizes bound a Buffer.
type BufferSizes struct {
	Initial, Streaming, Limit int
}

// IdleReads is how many small reads return a grown buffer to its initial
// size.
const IdleReads = 64

// ErrLineTooLong is LineLen's error for a line over its bound.
var ErrLineTooLong = errors.New("control line too long")

// NewBuffer reads r within sizes.
func NewBuffer(r io.Reader, sizes BufferSizes) *Buffer {
	sizes.Streaming = max(sizes.Streaming, sizes.Initial)
	sizes.Limit = max(sizes.Limit, sizes.Streaming)
	return &Buffer{r: r, buf: make([]byte, sizes.Initial), sizes: sizes}
}

// Bytes are the buffered bytes not yet consumed.
func (b *Buffer) Bytes() []byte { return b.buf[b.start:b.end] }

// Size is the buffer's current size, for tests and metrics.
func (b *Buffer) Size() int { return len(b.buf) }

// LineLen returns the length of the next line, up to its '\n' (exclusive),
// reading as needed; a line longer than maxLine is ErrLineTooLong.
func (b *Buffer) LineLen(maxLine int) (int, error) {
	scanned := 0
	for {
		if i := bytes.IndexByte(b.buf[b.start+scanned:b.end], '\n'); i >= 0 {
			if scanned+i > maxLine {
				return 0, ErrLineTooLong
			}
			return scanned + i, nil
		}
		scanned = b.end - b.start
		if scanned > maxLine {
			return 0, ErrLineTooLong
		}
		if err := b.more(scanned + 1); err != nil {
			return 0, err
		}
	}
}

// Ensure reads until n bytes are buffered past what was consumed. It may
// move them: slices taken before it are stale, offsets are not.
func (b *Buffer) Ensure(n int) error {
	for b.end-b.start < n {
		if err := b.more(n); err != nil {
			if errors.Is(err, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// Consume drops the first n buffered bytes.
func (b *Buffer) Consume(n int) {
	b.start += n
	if b.start == b.end {
		b.start, b.end = 0, 0
	}
}

// more reads at least one byte, first making room for a frame of want
// bytes: moving what is buffered to the front, or growing.
func (b *Buffer) more(want int) error {
	if want > b.sizes.Limit {
		return fmt.Errorf("a frame of %d bytes is over the read buffer's limit of %d", want, b.sizes.Limit)
	}
	grow := b.filled && len(b.buf) < b.sizes.Streaming // more is coming than it holds
	// Compact too when the room left past the buffered bytes is under a
	// quarter of the buffer and what is buffered is small: under load, a
	// read into a sliver of room is a system call for a few bytes.
	cramped := b.start > 0 && len(b.buf)-b.end < len(b.buf)/4 && b.end-b.start <= len(b.buf)/4
	if grow || cramped || b.start+want > len(b.buf) || b.end == len(b.buf) {
		size := len(b.buf)
		if grow {
			size *= 2
		}
		for size < want {
			size *= 2
		}
		size = min(size, b.sizes.Limit)
		if size > len(b.buf) {
			grown := make([]byte, size)
			b.end = copy(grown, b.buf[b.start:b.end])
			b.buf, b.start, b.idle = grown, 0, 0
		} else {
			b.end = copy(b.buf, b.buf[b.start:b.end])
			b.start = 0
		}
	}
	if b.start == b.end && len(b.buf) > b.sizes.Initial {
		if b.idle++; b.idle > IdleReads {
			b.buf, b.start, b.end, b.idle = make([]byte, b.sizes.Initial), 0, 0, 0
		}
	}
	n, err := b.r.Read(b.buf[b.end:])
	b.filled = n == len(b.buf)-b.end
	b.end += n
	if n >= b.sizes.Initial {
		b.idle = 0
	}
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}
