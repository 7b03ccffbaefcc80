package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// The dial role, apart from the others: it has no sidecar to connect to.
//
//	probe dial -addr HOST:PORT [-addr ...] [-interval 500ms] [-timeout 1s]
//
// It dials every address each interval, each dial bounded by the timeout
// (the connect and then the NATS INFO line), and counts the outcomes
// (probestats.DialTarget). It prints a DIAL line whenever a target's
// outcome changes, every -report-interval and at exit, serves the same at
// /stats on -stats-listen, and is ready (/readyz) once every target has
// been dialed. It exits 0 on SIGTERM or SIGINT.

// addrList is a repeatable -addr.
type addrList []string

func (a *addrList) String() string { return strings.Join(*a, ",") }
func (a *addrList) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			if _, _, err := net.SplitHostPort(s); err != nil {
				return fmt.Errorf("%q is not HOST:PORT: %w", s, err)
			}
			*a = append(*a, s)
		}
	}
	return nil
}

type dialOptions struct {
	addrs          addrList
	interval       time.Duration
	timeout        time.Duration
	statsListen    string
	reportInterval time.Duration
	id             string
}

func parseDialFlags(args []string) (dialOptions, error) {
	host, _ := os.Hostname()
	var o dialOptions
	fs := flag.NewFlagSet(probestats.RoleDial, flag.ContinueOnError)
	fs.Var(&o.addrs, "addr", "HOST:PORT to dial (repeatable, or comma-separated)")
	fs.DurationVar(&o.interval, "interval", 500*time.Millisecond, "time between rounds of dials")
	fs.DurationVar(&o.timeout, "timeout", time.Second, "how long one dial may take: the connect, then the INFO line")
	fs.StringVar(&o.statsListen, "stats-listen", ":8080", "where /stats and /readyz are served; empty: nowhere")
	fs.DurationVar(&o.reportInterval, "report-interval", 5*time.Second, "how often a DIAL line is printed besides the changes")
	fs.StringVar(&o.id, "id", host, "this probe's name")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case len(o.addrs) == 0:
		return o, errors.New("-addr is required")
	case o.interval <= 0 || o.timeout <= 0 || o.reportInterval <= 0:
		return o, fmt.Errorf("-interval (%s), -timeout (%s) and -report-interval (%s) must be positive", o.interval, o.timeout, o.reportInterval)
	}
	return o, nil
}

// dialMain is the dial role's main: the process's exit status.
func dialMain(args []string) int {
	o, err := parseDialFlags(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe dial: %v\n", err)
		return 2
	}
	log.SetPrefix("dial " + o.id + ": ")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	d := newDialer(o)
	stopServing, err := d.serve(o.statsListen)
	if err != nil {
		log.Printf("error: %v", err)
		return 1
	}
	defer stopServing()
	d.run(ctx)
	d.print(true)
	log.Printf("stopped")
	return 0
}

// dialer dials its targets and keeps their counts.
type dialer struct {
	o       dialOptions
	started time.Time
	mu      sync.Mutex
	rounds  int64
	targets []probestats.DialTarget
}

func newDialer(o dialOptions) *dialer {
	d := &dialer{o: o, started: time.Now()}
	for _, a := range o.addrs {
		d.targets = append(d.targets, probestats.DialTarget{Addr: a, Outcomes: map[string]int64{}})
	}
	return d
}

// run dials every target each interval until ctx ends.
func (d *dialer) run(ctx context.Context) {
	tick := time.NewTicker(d.o.interval)
	defer tick.Stop()
	lastReport := time.Now()
	for {
		changed := d.round(ctx)
		if ctx.Err() != nil {
			return
		}
		if changed || time.Since(lastReport) >= d.o.reportInterval {
			d.print(false)
			lastReport = time.Now()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round dials every target once, concurrently (a timeout on one does not
// delay the others), and reports whether a target's outcome changed.
func (d *dialer) round(ctx context.Context) bool {
	type result struct {
		outcome, errText, server string
		took                     time.Duration
		at                       time.Time
	}
	results := make([]result, len(d.o.addrs))
	var wg sync.WaitGroup
	for i, addr := range d.o.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			outcome, server, err := dialOnce(ctx, addr, d.o.timeout)
			r := result{outcome: outcome, server: server, took: time.Since(start), at: start}
			if err != nil {
				r.errText = err.Error()
			}
			results[i] = r
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false // the dials were cut short: not an outcome
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	changed := false
	for i, r := range results {
		t := &d.targets[i]
		if t.Last != r.outcome {
			changed = true
		}
		t.Attempts++
		t.Outcomes[r.outcome]++
		t.Last, t.LastError, t.LastMillis = r.outcome, r.errText, float64(r.took.Microseconds())/1000
		if r.server != "" {
			t.ServerName = r.server
		}
		if t.FirstThroughUnixNano == 0 && (r.outcome == probestats.DialInfo || r.outcome == probestats.DialConnected) {
			t.FirstThroughUnixNano = r.at.UnixNano()
		}
	}
	d.rounds++
	return changed
}

// dialOnce opens a TCP connection to addr and reads the first line a NATS
// server sends (INFO {json}), all within timeout; it returns the outcome,
// the server's name from INFO, and the error behind an outcome other than
// DialInfo.
func dialOnce(ctx context.Context, addr string, timeout time.Duration) (outcome, server string, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return probestats.DialError, "", err
	}
	// The name first, apart: a lookup that fails or times out is an
	// error, never a refusal.
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return probestats.DialError, "", err
	}
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(ips[0], port))
	if err != nil {
		return classifyDialError(err), "", err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	_ = conn.SetReadDeadline(deadline)
	line, err := bufio.NewReaderSize(conn, 4096).ReadSlice('\n')
	if err != nil {
		return probestats.DialConnected, "", fmt.Errorf("connected, but no INFO line: %w", err)
	}
	rest, ok := strings.CutPrefix(string(line), "INFO ")
	if !ok {
		return probestats.DialConnected, "", fmt.Errorf("connected, but the first line is not INFO: %.40q", line)
	}
	var info struct {
		ServerName string `json:"server_name"`
	}
	_ = json.Unmarshal([]byte(strings.TrimSpace(rest)), &info)
	return probestats.DialInfo, info.ServerName, nil
}

// classifyDialError tells a refusal (a reset or an ICMP unreachable) and
// a timeout (dropped) from anything else.
func classifyDialError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		// REJECT sends a reset (refused) or an ICMP unreachable, which
		// the kernel turns into one of these.
		return probestats.DialRefused
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return probestats.DialTimeout
	}
	return probestats.DialError
}

func (d *dialer) stats(final bool) probestats.DialStats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := probestats.DialStats{Role: probestats.RoleDial, ID: d.o.id, StartedUnixNano: d.started.UnixNano(),
		AtUnixNano: time.Now().UnixNano(), Final: final, Rounds: d.rounds}
	for _, t := range d.targets {
		c := t
		c.Outcomes = make(map[string]int64, len(t.Outcomes))
		for k, v := range t.Outcomes {
			c.Outcomes[k] = v
		}
		s.Targets = append(s.Targets, c)
	}
	return s
}

func (d *dialer) print(final bool) {
	line, err := d.stats(final).Line()
	if err != nil {
		log.Printf("encoding a report: %v", err)
		return
	}
	fmt.Fprintln(os.Stdout, line)
}

// serve serves /stats and /readyz (ready once every target was dialed).
func (d *dialer) serve(addr string) (func(), error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d.stats(false))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		rounds := d.rounds
		d.mu.Unlock()
		if rounds == 0 {
			http.Error(w, "no round of dials yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return serveStats(addr, mux)
}
