package protocol

import "strconv"

// Server-to-client control lines that take no arguments.
var (
	OK   = []byte("+OK\r\n")
	Ping = []byte("PING\r\n")
	Pong = []byte("PONG\r\n")
)

// AppendInfo appends "INFO <json>\r\n".
func AppendInfo(dst, infoJSON []byte) []byte {
	dst = append(dst, "INFO "...)
	dst = append(dst, infoJSON...)
	return append(dst, "\r\n"...)
}

// AppendErr appends "-ERR '<text>'\r\n", nats-server's form.
func AppendErr(dst []byte, text string) []byte {
	dst = append(dst, "-ERR '"...)
	dst = append(dst, text...)
	return append(dst, "'\r\n"...)
}

// AppendMsgHead appends a MSG (header nil) or an HMSG up to its payload:
// the control line and the header block. The caller writes the payload of
// payloadLen bytes and a CRLF after it, so that a large payload can be
// written from where it is rather than copied behind the line. Subjects
// and sids are strings: the sidecar keeps them as such per subscription,
// and converting them would cost an allocation per message.
func AppendMsgHead(dst []byte, subject, sid, reply string, header []byte, payloadLen int) []byte {
	return AppendMsgHeadPrefixed(dst, "", subject, sid, reply, header, payloadLen)
}

// AppendMsgHeadPrefixed is AppendMsgHead for the subject prefix+subject,
// without joining them first: the sidecar delivers a message on its pod's
// inbox space under the application's own inbox prefix.
func AppendMsgHeadPrefixed(dst []byte, prefix, subject, sid, reply string, header []byte, payloadLen int) []byte {
	if header == nil {
		dst = append(dst, "MSG "...)
		dst = append(dst, prefix...)
		dst = appendSubjectSIDReply(dst, subject, sid, reply)
		dst = strconv.AppendInt(dst, int64(payloadLen), 10)
		return append(dst, "\r\n"...)
	}
	dst = append(dst, "HMSG "...)
	dst = append(dst, prefix...)
	dst = appendSubjectSIDReply(dst, subject, sid, reply)
	dst = strconv.AppendInt(dst, int64(len(header)), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(header)+payloadLen), 10)
	dst = append(dst, "\r\n"...)
	return append(dst, header...)
}

func appendSubjectSIDReply(dst []byte, subject, sid, reply string) []byte {
	dst = append(dst, subject...)
	dst = append(dst, ' ')
	dst = append(dst, sid...)
	dst = append(dst, ' ')
	if len(reply) > 0 {
		dst = append(dst, reply...)
		dst = append(dst, ' ')
	}
	return dst
}
