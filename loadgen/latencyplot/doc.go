// Package latencyplot draws HdrHistogram's "percentile distribution" plot
// of latency histograms with gonum.org/v1/plot, as SVG or PNG.
//
// The x axis is the percentile on the "nines" scale: x = 1/(1−p) on a log
// axis, so that 90%, 99%, 99.9%, ... are evenly spaced and the tail, where
// coordinated omission and stalls show, gets as much room as the median.
// The y axis is latency in milliseconds on a log axis: the series of one
// plot (direct against two sidecars, say) differ by tens of microseconds at
// the median and by milliseconds in the tail, and on a linear axis the
// median would be a flat line at zero. Each series is drawn through its
// value at each of Percentiles, then its maximum, placed one nine past the
// last percentile and labelled "max".
//
// It lives apart from package loadgen so that the plotting library (and
// its fonts) reaches only the programs that draw.
package latencyplot
