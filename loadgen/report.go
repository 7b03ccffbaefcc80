package loadgen

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Quantiles are the percentiles a summary reports, up to 99.9999%, then
// the maximum.
var Quantiles = []float64{50, 90, 99, 99.9, 99.99, 99.999, 99.9999}

// Distribution is one histogram summarised, in microseconds.
type Distribution struct {
	Count       int64                  `json:"count"`
	Percentiles map[string]int64       `json:"percentilesMicros"`
	Max         int64                  `json:"maxMicros"`
	Histogram   *hdrhistogram.Snapshot `json:"histogram,omitempty"`
}

func summarise(h *hdrhistogram.Histogram, full bool) Distribution {
	d := Distribution{Count: h.TotalCount(), Percentiles: map[string]int64{}, Max: h.Max()}
	for _, q := range Quantiles {
		d.Percentiles[fmt.Sprint(q)] = h.ValueAtQuantile(q)
	}
	if full {
		d.Histogram = h.Export()
	}
	return d
}

// Summary is a run in JSON: the configuration, counts, CPU and the three
// distributions (with the full histograms, so runs can be merged).
type Summary struct {
	Mode         Mode         `json:"mode"`
	Rate         float64      `json:"rate"`
	Size         int          `json:"size"`
	Connections  int          `json:"connections"`
	Sent         int64        `json:"sent"`
	Received     int64        `json:"received"`
	Failed       int64        `json:"failed"`
	NoResponders int64        `json:"noResponders"`
	Clamped      int64        `json:"clamped"`
	ElapsedNanos int64        `json:"elapsedNanos"`
	CPUNanos     int64        `json:"cpuNanos"`
	Corrected    Distribution `json:"corrected"`
	Uncorrected  Distribution `json:"uncorrected"`
	SendLag      Distribution `json:"sendLag"`
}

// Summary returns the run's summary.
func (r *Result) Summary() Summary {
	return Summary{
		Mode: r.Config.Mode, Rate: r.Config.Rate, Size: r.Config.Size, Connections: r.Config.Connections,
		Sent: r.Sent, Received: r.Received, Failed: r.Failed, NoResponders: r.NoResponders, Clamped: r.Clamped,
		ElapsedNanos: int64(r.Elapsed), CPUNanos: int64(r.CPU),
		Corrected: summarise(r.Corrected, true), Uncorrected: summarise(r.Uncorrected, true), SendLag: summarise(r.SendLag, true),
	}
}

// WriteJSON writes the summary as one JSON document.
func (r *Result) WriteJSON(w io.Writer) error {
	return json.NewEncoder(w).Encode(r.Summary())
}

// WriteReport writes the corrected distribution in HdrHistogram's
// percentile format, then a table of the corrected, uncorrected and
// send-lag percentiles side by side, the counts and the CPU used.
func (r *Result) WriteReport(w io.Writer) error {
	c := r.Config
	fmt.Fprintf(w, "# weighstation bench: %s, %d B at %g/s over %d connection(s) for %s, subject %s\n", c.Mode, c.Size, c.Rate, c.Connections, c.Duration, c.Subject)
	fmt.Fprintf(w, "# corrected latency (from the intended send time), microseconds\n")
	if _, err := r.Corrected.PercentilesPrint(w, 5, 1); err != nil {
		return err
	}
	fmt.Fprintf(w, "\n%-10s %14s %14s %14s\n", "percentile", "corrected µs", "uncorrected µs", "send lag µs")
	for _, q := range Quantiles {
		fmt.Fprintf(w, "%-10s %14d %14d %14d\n", fmt.Sprintf("%g%%", q), r.Corrected.ValueAtQuantile(q), r.Uncorrected.ValueAtQuantile(q), r.SendLag.ValueAtQuantile(q))
	}
	fmt.Fprintf(w, "%-10s %14d %14d %14d\n", "max", r.Corrected.Max(), r.Uncorrected.Max(), r.SendLag.Max())
	perMsg := time.Duration(0)
	if r.Sent > 0 {
		perMsg = r.CPU / time.Duration(r.Sent)
	}
	fmt.Fprintf(w, "\nsent %d, received %d, failed %d (no responders %d), clamped %d; generator CPU %s (%s per message, %.0f%% of one core)\n",
		r.Sent, r.Received, r.Failed, r.NoResponders, r.Clamped, r.CPU.Round(time.Millisecond), perMsg, 100*r.CPU.Seconds()/max(r.Elapsed.Seconds(), 1e-9))
	return nil
}

// WritePlotterFiles writes the three distributions in HdrHistogram's
// percentile format (the HdrHistogram plotter's input), one file each:
// prefix.corrected.hgrm, prefix.uncorrected.hgrm, prefix.sendlag.hgrm.
func (r *Result) WritePlotterFiles(prefix string) error {
	for name, h := range map[string]*hdrhistogram.Histogram{"corrected": r.Corrected, "uncorrected": r.Uncorrected, "sendlag": r.SendLag} {
		f, err := os.Create(prefix + "." + name + ".hgrm")
		if err != nil {
			return fmt.Errorf("bench: writing the %s distribution: %w", name, err)
		}
		if _, err := h.PercentilesPrint(f, 5, 1); err != nil {
			f.Close()
			return fmt.Errorf("bench: writing the %s distribution: %w", name, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench: writing the %s distribution: %w", name, err)
		}
	}
	return nil
}
