package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// steps is how many steps the demo has (the seven).
const steps = 7

// progress prints what the demo is doing, each line with the time since
// it started: "[01:05] step 5/7: ...".
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
}

func newProgress(w io.Writer, start time.Time) *progress { return &progress{w: w, start: start} }

func elapsed(d time.Duration) string {
	d = d.Round(time.Second)
	return fmt.Sprintf("%02d:%02d", int(d.Minutes()), int(d.Seconds())%60)
}

func (p *progress) line(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%s] %s\n", elapsed(time.Since(p.start)), fmt.Sprintf(format, args...))
}

// step announces step n.
func (p *progress) step(n int, format string, args ...any) {
	p.line("step %d/%d: %s", n, steps, fmt.Sprintf(format, args...))
}

// say is a line within a step.
func (p *progress) say(format string, args ...any) { p.line("  "+format, args...) }

// block prints a command's output under the line that ran it, indented.
func (p *progress) block(title, text string) {
	p.say("%s", title)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(p.w, "        %s\n", l)
	}
}

// since is the time from the demo's start to t, for the timeline.
func (p *progress) since(t time.Time) time.Duration { return t.Sub(p.start) }
