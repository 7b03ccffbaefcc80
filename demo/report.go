package main

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/weighstation/weighstation/loadgen/latencyplot"
)

// report is step 7's first half: the load stops, and demo/report.html is
// written.
func (d *demo) report(context.Context) error {
	d.p.step(7, "stopping the load and writing %s", filepath.Join(d.o.out, "report.html"))
	d.bench.Stop()
	for _, l := range strings.Split(d.bench.Tail(5), "\n") {
		if strings.HasPrefix(l, "sent ") {
			d.p.say("weighstation bench: %s", l)
		}
	}
	ps, err := d.phases()
	if err != nil {
		return err
	}
	if err := d.showPhases(); err != nil {
		return err
	}
	page, err := d.renderReport(ps)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(d.o.out, 0o755); err != nil {
		return err
	}
	path := filepath.Join(d.o.out, "report.html")
	if err := os.WriteFile(path, page, 0o644); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	d.res.Report = path
	for _, p := range ps {
		d.res.Phases = append(d.res.Phases, p.Name)
	}
	d.p.say("wrote %s (%d KiB): billing's latency percentiles per phase, the kill switch's timeline", path, len(page)>>10)
	return nil
}

// renderReport lays the page out: what the demo showed, billing's
// latency per phase on the nines axis, and the timeline.
func (d *demo) renderReport(ps []phase) ([]byte, error) {
	series := make([]latencyplot.Series, len(ps))
	for i, p := range ps {
		series[i] = latencyplot.Series{Name: fmt.Sprintf("%s (%d orders)", p.Name, p.h.TotalCount()), Histogram: p.h}
	}
	var plot bytes.Buffer
	title := fmt.Sprintf("billing (essential): latency from each order's intended send time, %g orders/s, by phase", d.o.rate)
	if err := latencyplot.Write(&plot, latencyplot.SVG, title, series); err != nil {
		return nil, fmt.Errorf("plotting billing's latency: %w", err)
	}
	rows := make([]phaseRow, len(ps))
	for i, p := range ps {
		rows[i] = phaseRow{Name: p.Name, Seconds: p.End.Sub(p.Start).Seconds(), Orders: p.h.TotalCount(),
			P50: micros(p.h.ValueAtQuantile(50)), P99: micros(p.h.ValueAtQuantile(99)), P999: micros(p.h.ValueAtQuantile(99.9)), Max: micros(p.h.Max())}
	}
	var events []eventRow
	for _, e := range d.events {
		events = append(events, eventRow{At: elapsed(d.p.since(e.At)), Offset: fmt.Sprintf("%.3f", d.p.since(e.At).Seconds()), What: e.What, Detail: e.Detail})
	}
	var page bytes.Buffer
	err := reportPage.Execute(&page, map[string]any{
		"Date":     time.Now().Format(time.RFC1123),
		"Rate":     d.o.rate,
		"Size":     d.o.size,
		"Result":   d.res,
		"Plot":     template.HTML(stripXMLHeader(plot.String())),
		"Timeline": template.HTML(d.timelineSVG(ps)),
		"Phases":   rows,
		"Events":   events,
		"Tables":   d.tables,
	})
	return page.Bytes(), err
}

type phaseRow struct {
	Name                string
	Seconds             float64
	Orders              int64
	P50, P99, P999, Max string
}

type eventRow struct{ At, Offset, What, Detail string }

// stripXMLHeader drops the XML declaration, which has no place inside an
// HTML page.
func stripXMLHeader(svg string) string {
	if strings.HasPrefix(svg, "<?xml") {
		if i := strings.Index(svg, "?>"); i >= 0 {
			return svg[i+2:]
		}
	}
	return svg
}

var reportPage = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>weighstation demo</title>
<style>
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1000px; }
table { border-collapse: collapse; margin: 1em 0; }
td, th { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f6f6f6; padding: 0.8em; overflow-x: auto; }
</style></head><body>
<h1>weighstation demo</h1>
<p>{{.Date}}. A real kube-apiserver and etcd with the chart installed by helm; the operator, a broker, three pods' sidecars
and their nats.go applications as local processes; {{.Rate}} orders/s of {{.Size}} bytes from
<code>weighstation bench</code> (open loop).</p>

<h2>What happened</h2>
<table>
<tr><th>automatic kill switch (spam filter slow)</th><td>KILLED <b>{{.Result.AutoKilled}}</b>; billing's P99 in status meanwhile {{.Result.BillingP99DuringOverload}}</td></tr>
<tr><th>manual kill switch (<code>kubectl patch</code>)</th><td>KILLED <b>{{.Result.ManualKilled}}</b>; propagation {{.Result.Propagation}} (status.config.propagationTime);
patch to orders-api's first fast failure {{.Result.PatchToEff}}; that check failed in {{.Result.FailFast}} (no responders)</td></tr>
<tr><th>while engaged</th><td>the spam filter's sidecar delivered {{.Result.SpamDeliveredWhileKilled}} orders, billing received {{.Result.BillingWhileKilled}}</td></tr>
<tr><th>oversize publish</th><td>{{.Result.SizeRefusal}}<br>Topic orders: {{.Result.RefusedSize}} refused for size</td></tr>
<tr><th>quota</th><td>{{.Result.RateRefusal}}<br>Topic orders-export: {{.Result.RefusedRate}} refused for rate</td></tr>
</table>

<h2>billing's latency, by phase</h2>
<p>The essential consumer's own measurement: from each order's intended send time (the load generator's schedule,
so that a stall counts in full) to its arrival in the application, through both sidecars and the broker.
Percentiles on HdrHistogram's "nines" axis.</p>
{{.Plot}}
<table><tr><th>phase</th><th>seconds</th><th>orders</th><th>p50</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{{range .Phases}}<tr><td>{{.Name}}</td><td class="n">{{printf "%.1f" .Seconds}}</td><td class="n">{{.Orders}}</td><td class="n">{{.P50}}</td><td class="n">{{.P99}}</td><td class="n">{{.P999}}</td><td class="n">{{.Max}}</td></tr>
{{end}}</table>

<h2>The kill switch's timeline</h2>
{{.Timeline}}
<table><tr><th>time</th><th>seconds</th><th>event</th><th>detail</th></tr>
{{range .Events}}<tr><td>{{.At}}</td><td class="n">{{.Offset}}</td><td>{{.What}}</td><td>{{.Detail}}</td></tr>
{{end}}</table>

<h2>Status at the end</h2>
<pre>$ kubectl get topics,subscriptions -n demo
{{.Tables}}</pre>
</body></html>
`))
