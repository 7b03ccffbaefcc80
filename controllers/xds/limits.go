package xds

import (
	"flag"
	"fmt"
	"time"
)

// Limits bound what one connection or stream can make the xDS server hold
// or do. Zero fields take DefaultLimits'.
type Limits struct {
	// MaxConcurrentStreams is the most streams (and calls) open at once on
	// one connection (-xds-max-concurrent-streams). A sidecar uses three:
	// its xDS stream, its Reports stream and, now and then, a credential
	// call.
	MaxConcurrentStreams int
	// MaxRecvMsgSize is the largest message a sidecar may send
	// (-xds-max-recv-msg-size): a report, an ACK. gRPC refuses a larger
	// one itself ("received message larger than max (N vs. limit)"); the
	// operator counts it (refused_total{reason="recv_msg_size"}) and logs
	// it naming the flag.
	MaxRecvMsgSize int
	// MaxSendMsgSize is the largest message sent to a sidecar
	// (-xds-max-send-msg-size): a push of its configuration. The sidecar
	// receives at most gRPC's default of 4 MiB, so a larger push would be
	// refused there; it is refused here instead, naming the flag.
	MaxSendMsgSize int
	// MaxStreamResources is the most resource names one stream may
	// subscribe to at once (-xds-max-stream-resources): its pod's own and
	// the shared resources (Topics, Subscriptions) that it names.
	MaxStreamResources int
	// MaxUnackedPushes is the most responses on one stream that the
	// sidecar has neither acknowledged nor refused
	// (-xds-max-unacked-pushes). A sidecar answers each before the next
	// is sent, so it has one or two; a stream past this is ended.
	MaxUnackedPushes int
}

// DefaultLimits are the defaults of Limits.
var DefaultLimits = Limits{
	MaxConcurrentStreams: 16,
	MaxRecvMsgSize:       4 << 20,
	MaxSendMsgSize:       4 << 20,
	MaxStreamResources:   10_000,
	MaxUnackedPushes:     32,
}

// Fixed limits of the xDS server.
const (
	// MaxNACKReasonBytes is the longest NACK reason kept (in the tracker,
	// status and the log); a longer one is cut at a UTF-8 boundary and
	// marked so.
	MaxNACKReasonBytes = 1024
	// maxHeaderListSize bounds a call's metadata (gRPC's default is 16
	// MiB): a bearer token is at most MaxTokenBytes.
	maxHeaderListSize = 64 << 10
	// handshakeTimeout bounds a connection's TLS and HTTP/2 handshakes
	// (gRPC's default is 120 s), so that half-open connections do not
	// pile up.
	handshakeTimeout = 10 * time.Second
	// maxConnectionIdle closes a connection that has had no stream this
	// long: a sidecar always holds its xDS stream, a junk caller does not.
	maxConnectionIdle = 5 * time.Minute
)

// RegisterFlags binds l to the operator's flags; l's values are the
// defaults.
func (l *Limits) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&l.MaxConcurrentStreams, "xds-max-concurrent-streams", l.MaxConcurrentStreams, "the most streams and calls at once on one sidecar connection to the xDS server (a sidecar uses 3)")
	fs.IntVar(&l.MaxRecvMsgSize, "xds-max-recv-msg-size", l.MaxRecvMsgSize, "the largest message, in bytes, that the xDS server receives (a sidecar's report); larger ones end the stream RESOURCE_EXHAUSTED")
	fs.IntVar(&l.MaxSendMsgSize, "xds-max-send-msg-size", l.MaxSendMsgSize, "the largest message, in bytes, that the xDS server sends (a pod's configuration; sidecars receive at most 4 MiB)")
	fs.IntVar(&l.MaxStreamResources, "xds-max-stream-resources", l.MaxStreamResources, "the most resource names one xDS stream may subscribe to (its pod's own and the Topics and Subscriptions it names)")
	fs.IntVar(&l.MaxUnackedPushes, "xds-max-unacked-pushes", l.MaxUnackedPushes, "the most responses on one xDS stream neither acknowledged nor refused; a stream past it is ended")
}

// Validate refuses limits that no sidecar could work within, naming the
// flags.
func (l Limits) Validate() error {
	switch {
	case l.MaxConcurrentStreams < 3:
		return fmt.Errorf("-xds-max-concurrent-streams must be at least 3 (a sidecar's xDS stream, Reports stream and credential call), got %d", l.MaxConcurrentStreams)
	case l.MaxRecvMsgSize < 64<<10:
		return fmt.Errorf("-xds-max-recv-msg-size must be at least 64 KiB (a report), got %d", l.MaxRecvMsgSize)
	case l.MaxSendMsgSize < 64<<10:
		return fmt.Errorf("-xds-max-send-msg-size must be at least 64 KiB (a pod's configuration), got %d", l.MaxSendMsgSize)
	case l.MaxStreamResources < 1:
		return fmt.Errorf("-xds-max-stream-resources must be at least 1 (the pod's own), got %d", l.MaxStreamResources)
	case l.MaxUnackedPushes < 2:
		return fmt.Errorf("-xds-max-unacked-pushes must be at least 2, got %d", l.MaxUnackedPushes)
	}
	return nil
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxConcurrentStreams > 0 {
		d.MaxConcurrentStreams = l.MaxConcurrentStreams
	}
	if l.MaxRecvMsgSize > 0 {
		d.MaxRecvMsgSize = l.MaxRecvMsgSize
	}
	if l.MaxSendMsgSize > 0 {
		d.MaxSendMsgSize = l.MaxSendMsgSize
	}
	if l.MaxStreamResources > 0 {
		d.MaxStreamResources = l.MaxStreamResources
	}
	if l.MaxUnackedPushes > 0 {
		d.MaxUnackedPushes = l.MaxUnackedPushes
	}
	return d
}

// truncateReason cuts a sidecar's NACK reason to MaxNACKReasonBytes.
func truncateReason(s string) (string, bool) {
	if len(s) <= MaxNACKReasonBytes {
		return s, false
	}
	const mark = "… (truncated)"
	cut := MaxNACKReasonBytes - len(mark)
	// Back to the start of a UTF-8 sequence.
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + mark, true
}
