package main

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// payloadMagic starts every message the probe publishes or requests with,
// so that a subscriber can tell them from anything else on its subject.
const payloadMagic = "probe/v1"

// message is what a probe's payload carries: who sent it, which run of
// that sender (its start time, so that a restarted sender is a new
// sequence), its sequence number in the run, and when it was sent.
type message struct {
	ID       string
	Run      int64
	Seq      uint64
	SentNano int64
}

// encode writes m as "probe/v1 ID RUN SEQ SENT", padded with '.' to size
// bytes when it is shorter.
func encode(m message, size int) []byte {
	b := fmt.Appendf(nil, "%s %s %d %d %d", payloadMagic, m.ID, m.Run, m.Seq, m.SentNano)
	if pad := size - len(b); pad > 1 {
		b = append(b, ' ')
		b = append(b, bytes.Repeat([]byte{'.'}, pad-1)...)
	}
	return b
}

var errNotProbe = errors.New("not a probe payload")

// decode reads what encode wrote.
func decode(b []byte) (message, error) {
	f := bytes.Fields(b)
	if len(f) < 5 || string(f[0]) != payloadMagic {
		return message{}, errNotProbe
	}
	run, err1 := strconv.ParseInt(string(f[2]), 10, 64)
	seq, err2 := strconv.ParseUint(string(f[3]), 10, 64)
	sent, err3 := strconv.ParseInt(string(f[4]), 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil || seq == 0 {
		return message{}, fmt.Errorf("%w: %q: %v", errNotProbe, b, err)
	}
	return message{ID: string(f[1]), Run: run, Seq: seq, SentNano: sent}, nil
}
