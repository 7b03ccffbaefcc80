package protocol

// Limits bound what one client connection may send.
type Limits struct {
	// MaxControlLine is the most bytes of a control line's arguments (the
	// text after the command's verb, without the payload), as nats-server
	// measures its max_control_line. A longer one closes the connection.
	MaxControlLine int
	// ForwardedLineRoom is taken off MaxControlLine for the commands whose
	// arguments go on to the broker (PUB, HPUB, SUB): room for what the
	// sidecar adds to them there, where they must fit the broker's own
	// max_control_line.
	ForwardedLineRoom int
	// MaxPayload is the largest PUB or HPUB body (headers and payload), in
	// bytes: what INFO advertises as max_payload. A larger one closes the
	// connection, as nats-server does; stock clients check it themselves
	// first.
	MaxPayload int
}

// DefaultLimits are nats-server's defaults, a 4 KiB control line and a 1
// MiB payload, with UpstreamLineRoom of the control line kept for what the
// sidecar adds to what it forwards.
var DefaultLimits = Limits{MaxControlLine: 4096, ForwardedLineRoom: UpstreamLineRoom, MaxPayload: 1 << 20}

// UpstreamLineRoom is what the sidecar may add to a command's arguments on
// their way to the broker, whose max_control_line (4,096 by default) they
// must fit: a PUB becomes an HPUB with a header size, and its total size
// may gain a digit; a SUB's sid becomes the sidecar's, up to 20 digits (32
// bytes for these); and an inbox in a SUB's subject or a publish's reply
// subject is translated into the pod's inbox space, which may add up to 48
// (sidecar.MaxInboxPrefixBytes).
const UpstreamLineRoom = 32 + 48

// verbRoom bounds what comes before a control line's arguments: the verb
// (CONNECT is the longest) and the spaces after it.
const verbRoom = 16

// maxArgs is the most arguments any client command takes (HPUB: subject,
// reply, header size, total size); one more detects surplus arguments.
const maxArgs = 5
