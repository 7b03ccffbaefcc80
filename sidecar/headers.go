package sidecar

import (
	"bytes"
	"strconv"
	"time"
)

// Header blocks are handled as bytes, never decoded into maps: the sidecar
// needs only to check a block's shape, find and remove its reserved lines,
// and add its own, and it forwards everything else untouched.

// headerVersion starts every header block.
var headerVersion = []byte("NATS/1.0")

// noRespondersStatus is the broker's answer to a request nobody is
// subscribed to: an empty message whose header block has only the status
// line "NATS/1.0 503" (nats-server adds no description). The sidecar sends
// the same for requests to killed subscriptions.
var noRespondersStatus = []byte("NATS/1.0 503\r\n\r\n")

// validHeader reports whether h is a header block: the version line, then
// "Name: value" lines, then an empty line, each ended by CRLF. nats.go
// refuses to decode any other, so the sidecar refuses to forward it. A CR
// or LF anywhere but in a line's CRLF is refused too: nats.go ends a line
// at a bare LF, where the sidecar's scan for its reserved headers would
// not, and a reserved header could pass it.
func validHeader(h []byte) bool {
	if !bytes.HasPrefix(h, headerVersion) || !bytes.HasSuffix(h, []byte("\r\n\r\n")) {
		return false
	}
	for rest, first := h[:len(h)-2], true; len(rest) > 0; first = false {
		eol := bytes.IndexByte(rest, '\n')
		if eol < 1 || rest[eol-1] != '\r' {
			return false // the block ends with CRLF, so a '\n' is there
		}
		line := rest[:eol-1]
		if bytes.IndexByte(line, '\r') >= 0 {
			return false
		}
		if !first { // the version line has no name
			colon := bytes.IndexByte(line, ':')
			if colon < 1 || bytes.ContainsAny(line[:colon], " \t") {
				return false
			}
		}
		rest = rest[eol+1:]
	}
	return true
}

// versionLineEnd is where a block's first line ends, after its CRLF.
func versionLineEnd(h []byte) int {
	if i := bytes.Index(h, []byte("\r\n")); i >= 0 {
		return i + 2
	}
	return len(h)
}

// isNoResponders reports whether a message is the broker's no-responders
// status: a status line with 503 and no payload.
func isNoResponders(h, payload []byte) bool {
	if len(payload) != 0 || len(h) == 0 {
		return false
	}
	status, ok := bytes.CutPrefix(h[:versionLineEnd(h)], headerVersion)
	return ok && bytes.HasPrefix(bytes.TrimLeft(status, " "), []byte("503"))
}

// stripReserved finds the reserved header lines (StampHeader and
// OriginHeader, in any case) in a valid header block and returns what they
// said and the block without them, built in dst; without any, it returns
// h itself. A block left with neither status nor headers is returned
// empty: the message then travels as a MSG, as it was published.
func stripReserved(dst, h []byte) ([]byte, reserved) {
	var r reserved
	first := versionLineEnd(h)
	kept := first
	for i := first; i+2 <= len(h); {
		eol := bytes.Index(h[i:], []byte("\r\n"))
		if eol <= 0 {
			break // the final empty line
		}
		line := h[i : i+eol]
		name, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, stampHeaderBytes):
			r.sentUnixNanos, _ = strconv.ParseInt(string(value), 10, 64)
		case bytes.EqualFold(name, originHeaderBytes):
			r.origin = value
		default:
			if r.removed > 0 {
				dst = append(dst, line...)
				dst = append(dst, "\r\n"...)
			}
			kept = i + eol + 2
			i += eol + 2
			continue
		}
		if r.removed == 0 {
			dst = append(dst[:0], h[:kept]...) // what came before the first reserved line
		}
		r.removed++
		i += eol + 2
	}
	if r.removed == 0 {
		return h, r
	}
	if len(dst) == len(headerVersion)+2 && bytes.Equal(dst[:len(headerVersion)], headerVersion) {
		return dst[:0], r // nothing but a bare version line is left
	}
	return append(dst, "\r\n"...), r
}

var (
	stampHeaderBytes  = []byte(StampHeader)
	originHeaderBytes = []byte(OriginHeader)
)

// appendStamp appends the StampHeader line for now.
func appendStamp(dst []byte, now time.Time) []byte {
	dst = append(dst, StampHeader...)
	dst = append(dst, ": "...)
	dst = strconv.AppendInt(dst, now.UnixNano(), 10)
	return append(dst, "\r\n"...)
}

// appendOrigin appends the OriginHeader line for a connection's value.
func appendOrigin(dst []byte, origin string) []byte {
	dst = append(dst, OriginHeader...)
	dst = append(dst, ": "...)
	dst = append(dst, origin...)
	return append(dst, "\r\n"...)
}
