// Package report sends the sidecar's measurements to the operator: every
// interval it builds one Report (api/xds/v1/report.proto) and sends it on a
// Reports stream, which the operator merges into the status of the
// Subscriptions and Topics the report names.
//
// What a report holds, per Subscription policy of the configuration in
// force under which the applications subscribed since the sidecar started:
//   - end-to-end latency, from the publishing sidecar's stamp to this
//     sidecar's write of the message to the application's socket (two
//     clocks; unstamped messages are not in it), and dwell, from the
//     message's arrival in this sidecar to that write (one clock), as the
//     HdrHistograms of the values recorded in the interval only, sent as
//     their populated buckets (report.proto's Histogram, at the recorders'
//     geometry), which the operator adds up without decoding;
//   - messages delivered, and dropped by reason (the names of the
//     sidecar's metrics), as totals since the sidecar started;
//   - the kill switch's state: Manual (engaged by hand) or Auto (the
//     breaker tripped). The sidecar has no shed state: its memory budget
//     sheds messages, one by one, which the drops count with reason shed.
//
// And per Topic of the configuration that the applications published
// under: attempts, forwarded, and refused by reason (access, size, rate),
// as totals. Publishes that failed because the broker was away and the
// outage buffer full (the metrics' failed_upstream) are no refusal of the
// Topic's policy and are not listed: they are attempts less forwarded less
// refused.
//
// What is not measured: the time a message then spends in the
// application's own client library (its buffers, its dispatch) is not seen
// by the sidecar; nor are the default policy's publishes and subscriptions
// that no Subscription covers (inboxes), which belong to no resource; nor
// the latency values the recorders clamped into their range (they are in
// the histograms at the range's edge, not counted apart).
//
// Delivery: each report is built once and kept until the operator
// acknowledges its sequence number; an unacknowledged one is resent,
// unchanged, on the next stream, before newer ones, and the operator
// counts each (pod UID, boot ID, sequence) once. At most MaxPending
// reports wait: past that the oldest is dropped and counted. The counters
// are totals, so a lost report loses none of them; its histogram values
// are lost.
//
// The package imports no Kubernetes package (the sidecar's rule).
package report
