package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/tokenfile"
	"github.com/weighstation/weighstation/loadgen"
)

// runBench is `weighstation bench`: the open-loop load generator (package
// loadgen), pointed at any NATS endpoint: a sidecar or a broker.
func runBench(args []string) error {
	cfg := loadgen.DefaultConfig
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&cfg.URL, "url", cfg.URL, "where publishers (or requesters) connect")
	fs.StringVar(&cfg.SubURL, "sub-url", "", "where the subscriber connects in pubsub mode (default -url)")
	mode := fs.String("mode", string(cfg.Mode), "pubsub, reqrep, or respond (answer reqrep requests until interrupted)")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "messages (or requests) per second, in all")
	fs.IntVar(&cfg.Size, "size", cfg.Size, "payload bytes (at least 24: the send times ride in it)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long to send")
	fs.IntVar(&cfg.Connections, "connections", cfg.Connections, "publisher (or requester) connections; the rate splits evenly")
	fs.StringVar(&cfg.Subject, "subject", cfg.Subject, "subject to send on")
	fs.DurationVar(&cfg.Spin, "spin", cfg.Spin, "busy-wait this long before each send time instead of sleeping (at most a quarter of the interval between sends)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "request timeout (reqrep), and the wait for the last messages (pubsub)")
	tokenFile := fs.String("token-file", "", "a file holding the broker's token, when pointed at a broker that requires one")
	out := fs.String("out", "", "write the distributions in HdrHistogram's plotter format to <out>.corrected.hgrm, .uncorrected.hgrm and .sendlag.hgrm")
	jsonOut := fs.Bool("json", false, "print a JSON summary (with the full histograms) instead of the report")
	plotFile := fs.String("plot", "", "draw the corrected and uncorrected percentile distributions into this file, .svg or .png")
	if err := fs.Parse(args); err != nil {
		return err
	}
	// Checked before the run, so that a typo costs no run.
	if err := checkPlotFlag(*plotFile, *mode); err != nil {
		return err
	}
	if *tokenFile != "" {
		token, err := tokenfile.Read(*tokenFile)
		if err != nil {
			return err
		}
		cfg.Options = append(cfg.Options, nats.Token(token))
	}
	ctx, stop := signalContext()
	defer stop()
	if *mode == "respond" {
		return loadgen.Respond(ctx, cfg.URL, cfg.Subject, cfg.Options...)
	}
	cfg.Mode = loadgen.Mode(*mode)
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if *out != "" {
		if err := res.WritePlotterFiles(*out); err != nil {
			return err
		}
	}
	write, what := res.WriteReport, "the report"
	if *jsonOut {
		write, what = res.WriteJSON, "the JSON summary"
	}
	if err := write(os.Stdout); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	// After the report, so that a plot that fails loses no numbers.
	if *plotFile != "" {
		if err := plotBench(*plotFile, res); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	return nil
}
