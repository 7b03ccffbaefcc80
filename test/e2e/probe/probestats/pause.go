package probestats

import (
	"fmt"
	"strconv"
	"time"
)

// MaxPause is the longest pause a probe accepts (POST /pause?for=D): a
// pause that nobody ends stops by itself within it.
const MaxPause = 5 * time.Minute

// MaxFill is the most filler a pause may ask for (POST /pause?fill=N).
const MaxFill = 16 << 20

// FillAuto asks a pause for as much filler as the sockets between the
// sidecar and the probe may hold (POST /pause?fill=auto, the default).
const FillAuto = -1

// PauseStats is what a probe's pauses (POST /pause) held back: while
// paused, its connection reads nothing from its socket, so what the
// sidecar sends it waits in the sidecar, once the sockets between them
// are full (the pause's filler fills them at once).
type PauseStats struct {
	Paused bool `json:"paused"`
	// Pauses counts the pauses begun (a pause extended while paused is
	// the same one).
	Pauses int64 `json:"pauses"`
	// PausedNanos is the time spent paused in all, the current pause up
	// to the report included.
	PausedNanos int64 `json:"pausedNanos"`
	// LastStartUnixNano and LastEndUnixNano bound the latest pause; the
	// end is 0 while it lasts, and UntilUnixNano is then when it ends by
	// itself.
	LastStartUnixNano int64 `json:"lastStartUnixNano,omitempty"`
	LastEndUnixNano   int64 `json:"lastEndUnixNano,omitempty"`
	UntilUnixNano     int64 `json:"untilUnixNano,omitempty"`
	// Filler: messages the probe published to its own subject as a pause
	// began, to fill the sockets, each of them one sequence number of the
	// publisher FillPublisher (so that the subscriber tracks them as it
	// tracks any publisher's); in all, and the latest pause's, FillFirst
	// to FillLast.
	FillPublisher  string `json:"fillPublisher,omitempty"`
	FilledMessages int64  `json:"filledMessages,omitempty"`
	FilledBytes    int64  `json:"filledBytes,omitempty"`
	FillFirst      uint64 `json:"fillFirst,omitempty"`
	FillLast       uint64 `json:"fillLast,omitempty"`
}

// Last is the latest pause's length, up to now while it lasts.
func (p PauseStats) Last(now time.Time) time.Duration {
	switch {
	case p.LastStartUnixNano == 0:
		return 0
	case p.Paused:
		return now.Sub(time.Unix(0, p.LastStartUnixNano))
	}
	return time.Duration(p.LastEndUnixNano - p.LastStartUnixNano)
}

// PauseRecorder is a probe's pause state: the bookkeeping, with the
// times given, of pauses that begin, are extended and end. It is not safe
// for concurrent use.
type PauseRecorder struct {
	st PauseStats
	// done is the time spent in pauses that ended.
	done time.Duration
}

// ParsePauseFor reads a pause's length (POST /pause?for=D): a Go
// duration, positive and at most MaxPause.
func ParsePauseFor(s string) (time.Duration, error) {
	if s == "" {
		return 0, fmt.Errorf("for: a duration is required (at most %s), e.g. for=3s", MaxPause)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("for=%q: %w", s, err)
	}
	if d <= 0 || d > MaxPause {
		return 0, fmt.Errorf("for=%s: a pause lasts more than 0 and at most %s", d, MaxPause)
	}
	return d, nil
}

// ParseFill reads how much filler a pause asks for (POST
// /pause?fill=...): "auto" or nothing (FillAuto), or a number of bytes up
// to MaxFill (0: none).
func ParseFill(s string) (int64, error) {
	if s == "" || s == "auto" {
		return FillAuto, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > MaxFill {
		return 0, fmt.Errorf("fill=%q: auto, or a number of bytes from 0 to %d", s, MaxFill)
	}
	return n, nil
}

// Filled records the filler published as the current pause began:
// publisher's messages first to last, bytes in all.
func (r *PauseRecorder) Filled(publisher string, first, last uint64, bytes int64) {
	if last < first {
		return
	}
	r.st.FillPublisher = publisher
	r.st.FilledMessages += int64(last - first + 1)
	r.st.FilledBytes += bytes
	r.st.FillFirst, r.st.FillLast = first, last
}

// Pause pauses from now until until, or, while paused, moves the end of
// the current pause to until (earlier or later). It reports whether a new
// pause began.
func (r *PauseRecorder) Pause(now, until time.Time) bool {
	r.st.UntilUnixNano = until.UnixNano()
	if r.st.Paused {
		return false
	}
	r.st.Paused = true
	r.st.Pauses++
	r.st.LastStartUnixNano = now.UnixNano()
	r.st.LastEndUnixNano = 0
	r.st.FillFirst, r.st.FillLast = 0, 0
	return true
}

// Resume ends the current pause at now and reports how long it lasted;
// false when there was none.
func (r *PauseRecorder) Resume(now time.Time) (time.Duration, bool) {
	if !r.st.Paused {
		return 0, false
	}
	d := max(now.Sub(time.Unix(0, r.st.LastStartUnixNano)), 0)
	r.done += d
	r.st.Paused = false
	r.st.LastEndUnixNano = time.Unix(0, r.st.LastStartUnixNano).Add(d).UnixNano()
	r.st.UntilUnixNano = 0
	return d, true
}

// Paused reports whether a pause lasts.
func (r *PauseRecorder) Paused() bool { return r.st.Paused }

// Stats is the state as of now.
func (r *PauseRecorder) Stats(now time.Time) PauseStats {
	s := r.st
	s.PausedNanos = int64(r.done)
	if s.Paused {
		s.PausedNanos += int64(max(now.Sub(time.Unix(0, s.LastStartUnixNano)), 0))
	}
	return s
}
