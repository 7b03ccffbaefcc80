// Command probe is the end-to-end tests' application: a stock nats.go
// client of its pod's sidecar (nats://127.0.0.1:4222), in one of five
// roles, that counts what it sees so that the stories (test/e2e) can tell
// loss, refusal and fast failure apart:
//
//	probe publisher  -subject S -rate N -id NAME     open-loop publishes, each with the id, its run and a sequence number
//	probe subscriber -subject S [-queue Q]           gaps (losses), duplicates, late arrivals, per publisher
//	probe requester  -subject S -interval D -timeout D   ok / fast failure (no responders) / timeout, and when it switched
//	probe responder  -subject S [-queue Q]           answers every request
//	probe idle                                       connects to nothing (a pod that must start without a sidecar)
//	probe dial -addr HOST:PORT [-addr ...]           plain TCP dials, no sidecar: got through, NATS INFO, refused, timed out (dial.go)
//
// Every role prints one line, "PROBE {json}" (package probestats), every
// -report-interval and at exit, and serves the same JSON at /stats on
// -stats-listen (:8080), with /readyz for a readiness probe. It exits 0 on
// SIGTERM or SIGINT, after the final line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

const usage = "usage: probe publisher|subscriber|requester|responder|idle [flags] (probe ROLE -h lists them)"

// options are the flags of every role; each role reads the ones it needs.
type options struct {
	natsURL        string
	statsListen    string
	reportInterval time.Duration
	id             string
	subject        string
	queue          string
	rate           float64
	size           int
	interval       time.Duration
	timeout        time.Duration
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	log.SetOutput(os.Stderr) // stdout carries the report lines alone
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	roleName := os.Args[1]
	if roleName == probestats.RoleDial {
		os.Exit(dialMain(os.Args[2:]))
	}
	opts, err := parseFlags(roleName, os.Args[2:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "probe %s: %v\n%s\n", roleName, err, usage)
		os.Exit(2)
	}
	log.SetPrefix(roleName + " " + opts.id + ": ")
	if err := run(roleName, opts); err != nil {
		log.Printf("error: %v", err)
		os.Exit(1)
	}
}

func parseFlags(roleName string, args []string) (options, error) {
	host, _ := os.Hostname()
	var o options
	fs := flag.NewFlagSet(roleName, flag.ContinueOnError)
	fs.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "the pod's sidecar")
	fs.StringVar(&o.statsListen, "stats-listen", ":8080", "where /stats and /readyz are served; empty: nowhere")
	fs.DurationVar(&o.reportInterval, "report-interval", 500*time.Millisecond, "how often a PROBE line is printed")
	fs.StringVar(&o.id, "id", host, "this probe's name (a publisher's messages carry it)")
	fs.StringVar(&o.subject, "subject", "", "the subject to publish, subscribe or request on")
	fs.StringVar(&o.queue, "queue", "", "subscriber, responder: a queue group")
	fs.Float64Var(&o.rate, "rate", 100, "publisher: messages per second")
	fs.IntVar(&o.size, "size", 0, "publisher: pad each message to this many bytes")
	fs.DurationVar(&o.interval, "interval", 20*time.Millisecond, "requester: time between requests")
	fs.DurationVar(&o.timeout, "timeout", 200*time.Millisecond, "requester: how long a request waits for its reply")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch roleName {
	case probestats.RoleIdle:
		return o, nil
	case probestats.RolePublisher, probestats.RoleSubscriber, probestats.RoleRequester, probestats.RoleResponder:
	default:
		return o, fmt.Errorf("unknown role %q", roleName)
	}
	switch {
	case o.subject == "":
		return o, errors.New("-subject is required")
	case o.id == "":
		return o, errors.New("-id is required (no host name to default to)")
	case roleName == probestats.RolePublisher && o.rate <= 0:
		return o, fmt.Errorf("-rate must be positive, got %g", o.rate)
	case roleName == probestats.RoleRequester && (o.interval <= 0 || o.timeout <= 0):
		return o, fmt.Errorf("-interval (%s) and -timeout (%s) must be positive", o.interval, o.timeout)
	case o.reportInterval <= 0:
		return o, fmt.Errorf("-report-interval must be positive, got %s", o.reportInterval)
	}
	return o, nil
}

func newRole(name string, o options) role {
	switch name {
	case probestats.RolePublisher:
		return newPublisher(o)
	case probestats.RoleSubscriber:
		return newSubscriber(o)
	case probestats.RoleRequester:
		return newRequester(o)
	case probestats.RoleResponder:
		return newResponder(o)
	}
	return idle{}
}

func run(roleName string, o options) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	p := newProbe(roleName, o, newRole(roleName, o))
	stopServing, err := p.serve(o.statsListen)
	if err != nil {
		return err
	}
	defer stopServing()
	reporting := make(chan struct{})
	go func() {
		defer close(reporting)
		p.report(ctx, o.reportInterval)
	}()
	roleErr := p.runRole(ctx)
	stop()
	<-reporting
	p.printFinal()
	if roleErr != nil && !errors.Is(roleErr, context.Canceled) {
		return roleErr
	}
	log.Printf("stopped")
	return nil
}
