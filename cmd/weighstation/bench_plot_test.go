package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/loadgen/latencyplot/plottest"
)

// TestBenchPlotFlag: a -plot that could not be written stops the bench at
// once, before it connects (nothing listens at -url), naming the flag.
func TestBenchPlotFlag(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"PDF", []string{"-plot", filepath.Join(dir, "run.pdf")}, `the plot's format comes from the extension, and .pdf is neither .svg nor .png`},
		{"no extension", []string{"-plot", filepath.Join(dir, "run")}, `has no extension: the plot's format comes from it, .svg or .png`},
		{"respond mode", []string{"-mode", "respond", "-plot", filepath.Join(dir, "run.svg")}, "-plot: respond mode measures nothing to plot"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"bench", "-url", "nats://" + natstest.FreeAddr(t), "-duration", "100ms"}, tc.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exited with %v, want status 1:\n%s", err, out)
			}
			if !strings.Contains(string(out), "weighstation bench: -plot") || !strings.Contains(string(out), tc.want) {
				t.Fatalf("output does not name -plot and say %q:\n%s", tc.want, out)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("a refused -plot left files: %v", entries)
			}
		})
	}
}

// TestBenchPlot: a short run against a broker draws its corrected and
// uncorrected distributions into the -plot file, under a title with the
// run's parameters, one line each.
func TestBenchPlot(t *testing.T) {
	broker := natstest.StartBroker(t, nil)
	path := filepath.Join(t.TempDir(), "run.svg")
	out, err := exec.Command(buildBinary(t), "bench", "-url", broker.ClientURL(), "-rate", "400", "-size", "64", "-duration", "250ms", "-plot", path).CombinedOutput()
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, out)
	}
	svg, err := plottest.ReadSVG(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"weighstation bench: pubsub, 64 B at 400/s for 250ms over 1 connection(s)",
		"corrected: response time, from the intended send",
		"uncorrected: service time, from the actual send",
	} {
		if !svg.HasText(want) {
			t.Errorf("no text %q in the plot; its texts: %q", want, svg.Texts)
		}
	}
	if n := len(svg.Series()); n != 2 {
		t.Errorf("%d series lines, want 2; the lengths of all the lines: %v", n, svg.LineLengths())
	}
}
