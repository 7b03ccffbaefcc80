// Command apps is the demo's sample applications, one role per process:
//
//	apps orders-api  -nats URL -control ADDR   publishes, requests, and is refused
//	apps billing     -nats URL -control ADDR   the essential consumer; measures its latency
//	apps spam-filter -nats URL -control ADDR   the non-essential consumer and responder; can be made slow
//
// Each is a stock nats.go client of its pod's sidecar (-nats), as an
// application in a pod would be; the demo's driver (demo) steers it
// and reads what it saw over a local HTTP control port (-control,
// package demoapi). They log plain lines to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/demo/demoapi"
)

// app is one role: it subscribes and starts its work on nc, and serves
// its control paths on mux.
type app func(ctx context.Context, nc *nats.Conn, refusals <-chan error, mux *http.ServeMux) error

var roles = map[string]app{
	"orders-api":  ordersAPI,
	"billing":     billing,
	"spam-filter": spamFilter,
}

func main() {
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	if len(os.Args) < 2 || roles[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: apps orders-api|billing|spam-filter -nats URL -control ADDR")
		os.Exit(2)
	}
	role := os.Args[1]
	log.SetPrefix(role + ": ")
	fs := flag.NewFlagSet(role, flag.ExitOnError)
	url := fs.String("nats", nats.DefaultURL, "the pod's sidecar")
	control := fs.String("control", "127.0.0.1:0", "the demo's control port")
	_ = fs.Parse(os.Args[2:])
	if err := run(role, *url, *control); err != nil {
		log.Printf("error: %v", err)
		os.Exit(1)
	}
}

func run(role, url, control string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// nats.go reports a sidecar's -ERR (a refused publish) asynchronously;
	// orders-api waits for them, every role logs them.
	refusals := make(chan error, 16)
	nc, err := nats.Connect(url, nats.Name(role), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Printf("subscription %s: %v", sub.Subject, err)
				return
			}
			log.Printf("the sidecar refused: %v", err)
			select {
			case refusals <- err:
			default:
			}
		}))
	if err != nil {
		return fmt.Errorf("connecting to the sidecar %s: %w", url, err)
	}
	defer nc.Close()
	mux := http.NewServeMux()
	if err := roles[role](ctx, nc, refusals, mux); err != nil {
		return err
	}
	if err := nc.Flush(); err != nil {
		return fmt.Errorf("subscribing: %w", err)
	}
	mux.HandleFunc(demoapi.PathReady, func(w http.ResponseWriter, _ *http.Request) {
		if !nc.IsConnected() {
			http.Error(w, "not connected to the sidecar", http.StatusServiceUnavailable)
		}
	})
	ln, err := net.Listen("tcp", control)
	if err != nil {
		return fmt.Errorf("-control: %w", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Printf("connected to the sidecar at %s; control on %s", url, ln.Addr())
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	log.Printf("stopping")
	return nil
}
