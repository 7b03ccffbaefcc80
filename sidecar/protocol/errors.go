package protocol

import (
	"errors"
	"fmt"
)

// Error is a protocol violation by the client. Text is what the client is
// told in -ERR; Close says whether the connection must close after it, as
// nats-server closes it for these.
type Error struct {
	Text  string
	Close bool
	// Detail is for logs, not for the client (for example the sizes
	// involved).
	Detail string
	// kind is one of the sentinel errors below, for errors.Is.
	kind error
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Text
	}
	return e.Text + ": " + e.Detail
}

// Is makes errors.Is(err, ErrControlLineTooLong) and its peers work.
func (e *Error) Is(target error) bool { return e.kind == target }

// Sentinels for errors.Is. The texts sent to clients are nats-server's.
var (
	ErrControlLineTooLong = errors.New("maximum control line exceeded")
	ErrPayloadTooLarge    = errors.New("maximum payload violation")
	ErrUnknownOperation   = errors.New("unknown protocol operation")
	ErrMalformed          = errors.New("malformed command")
)

func controlLineTooLong(limit int) *Error {
	return &Error{Text: fmt.Sprintf("Maximum Control Line Exceeded (max_control_line %d)", limit), Close: true, kind: ErrControlLineTooLong}
}

func payloadTooLarge(size, limit int) *Error {
	// The client gets nats-server's exact text, which nats.go recognises.
	return &Error{Text: "Maximum Payload Violation", Close: true, kind: ErrPayloadTooLarge,
		Detail: fmt.Sprintf("a body of %d bytes over max_payload %d", size, limit)}
}

func unknownOperation() *Error {
	return &Error{Text: "Unknown Protocol Operation", Close: true, kind: ErrUnknownOperation}
}

func malformed(format string, args ...any) *Error {
	return &Error{Text: "Parser Error: " + fmt.Sprintf(format, args...), Close: true, kind: ErrMalformed}
}
