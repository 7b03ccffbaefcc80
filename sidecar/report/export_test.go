package report

import "time"

// CollectNow builds the report of the interval that ends at now and queues
// it, as each tick does: tests choose when reports are built.
func (r *Reporter) CollectNow(now time.Time) { r.collect(now) }

// SetInterval sets the time between ticks, below MinInterval too. Call it
// before Run.
func (r *Reporter) SetInterval(d time.Duration) { r.interval = d }
