// Package loadgen is weighstation's load generator: open-loop, free of
// coordinated omission (the wrk2 method).
//
// Every message has an intended send time from a constant-rate schedule,
// and its latency is measured from that time, so that a stall of the system
// under test shows as the queue of messages that should have been sent
// during it, not as one slow message. The sender sleeps until shortly before
// each send time and then busy-waits; how late it actually sent (send lag)
// is recorded in its own histogram, so the generator's own lag shows. Beside
// the corrected distribution it keeps the uncorrected one, measured from the
// actual send, for comparison: the difference between the two is what a
// closed-loop tool would have hidden.
//
// Modes:
//   - pubsub: publishers and a subscriber on separate connections; the
//     intended and actual send times ride in the payload (its first 24
//     bytes), and the subscriber measures on the same host's clock.
//   - reqrep: each connection sends requests one at a time on its share of
//     the schedule, as wrk2 does; a request that is late because the one
//     before it was slow is still measured from its intended time.
//
// Latency is recorded in microseconds, 1 µs to 1 hour at 3 significant
// digits; values outside are clamped and counted.
package loadgen
