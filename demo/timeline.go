package main

import (
	"net/url"
	"time"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// event is one moment of the kill switch's story, for the report.
type event struct {
	At     time.Time
	What   string
	Detail string
}

// mark records an event at the time it happened (which may be earlier
// than now: a time status or a log gave) and prints it.
func (d *demo) mark(at time.Time, what, detail string) {
	d.events = append(d.events, event{At: at, What: what, Detail: detail})
	if detail != "" {
		d.p.say("timeline %s: %s (%s)", elapsed(d.p.since(at)), what, detail)
	} else {
		d.p.say("timeline %s: %s", elapsed(d.p.since(at)), what)
	}
}

// phase starts billing's next latency phase.
func (d *demo) phase(name string) error {
	return d.apps[billing].post(demoapi.PathPhase, url.Values{"name": {name}}, nil)
}

func now() time.Time { return time.Now() }
