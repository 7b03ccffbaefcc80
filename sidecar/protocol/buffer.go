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
// grows only to hold one frame that does not fit (at most Limit bytes: a
// control line and the largest body). After IdleReads reads that each used
// less than the initial size, it returns to that size, so that a burst of
// large messages does not hold memory for ever.
//
// With a Memory (ChargeTo), every buffer past the initial one comes from
// it, charged to its budget: growth for speed is skipped when it refuses,
// and growth a frame needs fails with a *BudgetError. A frame's buffer is
// then that frame's size, and goes back to the Memory as soon as the frame
// is consumed (the buffer returns to Streaming), so that a connection that
// sent one large message and fell quiet does not hold it charged; the
// Memory may keep it for the next large frame.
type Buffer struct {
	r          io.Reader
	buf        []byte
	start, end int
	sizes      BufferSizes
	idle       int  // consecutive small reads into a grown buffer
	filled     bool // the last read filled all the room it had
	mem        Memory
}

// Memory provides a Buffer's memory past its initial size, charged to a
// budget that other buffers (and other memory) share.
type Memory interface {
	// Get returns a buffer of at least size bytes (its length), charged,
	// or nil when the budget refuses it. needed says that the frame being
	// read cannot be read without it (Get may wait for room); otherwise
	// the growth is for speed only, and is skipped on nil.
	Get(size int, needed bool) []byte
	// Put gives back a buffer Get returned, which the Buffer no longer
	// uses.
	Put(buf []byte)
}

// BudgetError is the error of a Buffer whose Memory refused what a frame
// needs.
type BudgetError struct {
	// Frame is the bytes the frame needs buffered; Size the buffer asked
	// for.
	Frame, Size int
}

func (e *BudgetError) Error() string {
	return fmt.Sprintf("a frame of %d bytes needs a read buffer of %d bytes, which its memory budget refused", e.Frame, e.Size)
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

// ChargeTo takes the buffer's memory past its initial size from m from
// here on; call it before the first read.
func (b *Buffer) ChargeTo(m Memory) { b.mem = m }

// Release gives back the buffer's memory: the buffer is not used again.
func (b *Buffer) Release() {
	b.drop()
	b.buf, b.start, b.end = nil, 0, 0
}

// fromMemory reports whether buf came from the Memory: every buffer but
// the initial one does, when there is one.
func (b *Buffer) fromMemory(buf []byte) bool { return b.mem != nil && len(buf) > b.sizes.Initial }

// drop gives the current buffer back to the Memory it came from.
func (b *Buffer) drop() {
	if b.fromMemory(b.buf) {
		b.mem.Put(b.buf)
	}
}

// resize moves the buffered bytes into a buffer of at least size bytes
// (the Memory's, past Initial), and gives the old one back. It reports
// false, changing nothing, when the Memory refuses.
func (b *Buffer) resize(size int, needed bool) bool {
	var resized []byte
	if b.mem == nil || size <= b.sizes.Initial {
		resized = make([]byte, size)
	} else if resized = b.mem.Get(size, needed); resized == nil {
		return false
	}
	n := copy(resized, b.buf[b.start:b.end])
	b.drop()
	b.buf, b.start, b.end, b.idle = resized, 0, n, 0
	return true
}

// Skip drops the next n bytes, reading them through the buffer as it is
// (it grows only as it would for speed), and returns the last two: a
// frame's CRLF, when n covers a frame.
func (b *Buffer) Skip(n int) (last [2]byte, err error) {
	for n > 0 {
		if b.start == b.end {
			if err := b.more(1); err != nil {
				if errors.Is(err, io.EOF) {
					return last, io.ErrUnexpectedEOF
				}
				return last, err
			}
		}
		chunk := b.buf[b.start:min(b.end, b.start+n)]
		if len(chunk) >= 2 {
			last = [2]byte{chunk[len(chunk)-2], chunk[len(chunk)-1]}
		} else {
			last = [2]byte{last[1], chunk[0]}
		}
		b.Consume(len(chunk))
		n -= len(chunk)
	}
	return last, nil
}

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
	if b.mem != nil && len(b.buf) > b.sizes.Streaming && want <= b.sizes.Streaming && b.end-b.start <= b.sizes.Streaming {
		// The large frame it grew for is consumed: its memory goes back
		// before the buffer waits for more, however long that is (to the
		// initial size, if there is no room for Streaming).
		if !b.resize(b.sizes.Streaming, false) {
			b.resize(max(b.sizes.Initial, b.end-b.start), false)
		}
	}
	grow := b.filled && len(b.buf) < b.sizes.Streaming // more is coming than it holds
	// Compact too when the room left past the buffered bytes is under a
	// quarter of the buffer and what is buffered is small: under load, a
	// read into a sliver of room is a system call for a few bytes.
	cramped := b.start > 0 && len(b.buf)-b.end < len(b.buf)/4 && b.end-b.start <= len(b.buf)/4
	if grow || cramped || b.start+want > len(b.buf) || b.end == len(b.buf) {
		size := len(b.buf)
		needed := want > size // else it fits once compacted
		if grow {
			size *= 2
		}
		for size < want {
			size *= 2
		}
		if size > b.sizes.Streaming && b.mem != nil {
			// Past Streaming a charged buffer holds one frame, for as long
			// as it takes to arrive: that frame's bytes and no more.
			size = max(want, len(b.buf), b.sizes.Streaming)
		}
		size = min(size, b.sizes.Limit)
		if size <= len(b.buf) || !b.resize(size, needed) {
			if needed {
				return &BudgetError{Frame: want, Size: size}
			}
			// No growth (for speed, refused): compact.
			b.end = copy(b.buf, b.buf[b.start:b.end])
			b.start = 0
		}
	}
	if b.start == b.end && len(b.buf) > b.sizes.Initial {
		if b.idle++; b.idle > IdleReads {
			b.resize(b.sizes.Initial, false)
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
