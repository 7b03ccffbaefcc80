package sidecar

import (
	"github.com/nats-io/nats.go"
)

// nats.go parses a header block's status line ("NATS/1.0 503 No Responders")
// into these keys; they go back into the status line, not the block.
const (
	statusHeader      = "Status"
	descriptionHeader = "Description"
)

// appendHeaderBlock encodes h as a NATS header block, the status line
// included, so that a client's nats.go reads back the same map (a 503
// status makes its Request return ErrNoResponders).
func appendHeaderBlock(dst []byte, h nats.Header) []byte {
	dst = append(dst, "NATS/1.0"...)
	if status := h.Get(statusHeader); status != "" {
		dst = append(dst, ' ')
		dst = append(dst, status...)
		if d := h.Get(descriptionHeader); d != "" {
			dst = append(dst, ' ')
			dst = append(dst, d...)
		}
	}
	dst = append(dst, "\r\n"...)
	for k, values := range h {
		if k == statusHeader || k == descriptionHeader {
			continue
		}
		for _, v := range values {
			dst = append(dst, k...)
			dst = append(dst, ": "...)
			dst = append(dst, v...)
			dst = append(dst, "\r\n"...)
		}
	}
	return append(dst, "\r\n"...)
}
