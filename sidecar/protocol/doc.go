// Package protocol reads the NATS client protocol as a server does, and
// writes the server's side of it, for the sidecar that stands in for a NATS
// server in front of the application.
//
// Reading: Reader parses CONNECT, PUB, HPUB, SUB, UNSUB, PING and PONG (verbs
// are case-insensitive, arguments separated by spaces or tabs, lines ended by
// CRLF or LF) from a stream, one command at a time, with no goroutine and no
// allocation per message once its buffers have grown. It enforces two
// explicit limits, the control line length and the payload size, and
// reports every violation as a *Error carrying the text a stock client
// understands (nats-server's own wording) and whether the connection must
// close.
//
// Writing: the Append functions build INFO, MSG, HMSG, +OK, -ERR, PING and
// PONG into a caller's buffer. ErrorCoalescer keeps a connection's -ERR
// replies from flooding a client, which would queue every one.
//
// It never judges subjects or policy: that is the sidecar's job, with
// matcher.
package protocol
