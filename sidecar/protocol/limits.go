package protocol

// Limits bound what one client connection may send.
type Limits struct {
	// MaxControlLine is the longest control line (a command and its
	// arguments, without the payload), in bytes. A longer one closes the
	// connection.
	MaxControlLine int
	// MaxPayload is the largest PUB or HPUB body (headers and payload), in
	// bytes: what INFO advertises as max_payload. A larger one closes the
	// connection, as nats-server does; stock clients check it themselves
	// first.
	MaxPayload int
}

// DefaultLimits are nats-server's defaults: a 4 KiB control line and a
// 1 MiB payload.
var DefaultLimits = Limits{MaxControlLine: 4096, MaxPayload: 1 << 20}

// maxArgs is the most arguments any client command takes (HPUB: subject,
// reply, header size, total size); one more detects surplus arguments.
const maxArgs = 5
