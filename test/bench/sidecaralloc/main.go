// Command benchsidecaralloc is the allocation half of `make
// bench-sidecar-core`: how many heap allocations the sidecar makes per
// message in steady state, as a float (`-benchmem` would round 0.99 down
// to 0), measured in a process that runs only the sidecar. The clients run
// here, in the driver, whose own allocations (nats.go allocates per
// message) therefore do not count; the broker runs in a third process.
//
// The mix, per round, each through the one sidecar (all clients are its
// applications):
//
//   - PUB to a subject with three local SUBs (a fan-out to three);
//   - HPUB (with a header) to the same subject;
//   - PUB to a queue group of two local members (one delivery);
//   - a request to a responder behind the same sidecar, and its reply;
//   - PUB from an echo:false connection that also subscribes (its own copy
//     suppressed), with one other SUB.
//
// The sidecar's allocations are read from its /metrics
// (go_memstats_mallocs_total) before and after at least -messages
// messages; an idle interval as long as the run is measured too and
// reported apart (timers, the kill-switch evaluator), so that the
// per-message figure is the difference.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/bench/gobench"
	"github.com/weighstation/weighstation/test/bench/harness"
)

// podConfig covers every subject of the mix, enforced, with queues deep
// enough that a round never drops, and no publish quota to hit.
const podConfig = `
version: alloc-bench
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics: []
subscriptions:
- {name: fan, subject: "fan.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
- {name: work, subject: "work.>", queueGroup: workers, essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
- {name: svc, subject: "svc.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
- {name: echo, subject: "echo.>", essential: true, killSwitch: {engaged: false}, limits: {maxPendingMessages: 100000, maxPendingBytes: 67108864, overflow: DropNewest}}
access: {mode: enforce}
`

const mallocs = "go_memstats_mallocs_total"

func main() {
	bin := flag.String("bin", "bin/weighstation", "the weighstation binary")
	messages := flag.Int("messages", 1_000_000, "published messages to measure over (at least 10⁶ for the figure to mean something)")
	size := flag.Int("size", 256, "payload bytes")
	flag.Parse()
	if err := run(*bin, *messages, *size); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sidecar-alloc:", err)
		os.Exit(1)
	}
}

// counts is what a run sent and what the applications received.
type counts struct{ published, delivered int64 }

func run(bin string, messages, size int) error {
	mesh, err := benchharness.StartMesh(benchharness.Binaries{Weighstation: bin}, 1, podConfig)
	if err != nil {
		return err
	}
	defer mesh.Stop()
	mix, err := newMix(mesh.SidecarURLs[0], size)
	if err != nil {
		return err
	}
	defer mix.close()
	// Warm up: the sidecar's buffers, pools and maps reach their steady
	// size, so that what follows is steady state.
	if _, err := mix.rounds(messages / 10); err != nil {
		return fmt.Errorf("warming up: %w", err)
	}
	before, err := scrape(mesh.MetricsURLs[0])
	if err != nil {
		return err
	}
	start := time.Now()
	c, err := mix.rounds(messages)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	after, err := scrape(mesh.MetricsURLs[0])
	if err != nil {
		return err
	}
	// The same time idle: what the sidecar allocates with no traffic.
	time.Sleep(elapsed)
	idleAfter, err := scrape(mesh.MetricsURLs[0])
	if err != nil {
		return err
	}
	busy, idle := after-before, idleAfter-after
	perMsg := (busy - idle) / float64(c.published)
	fmt.Printf("## Sidecar allocations per message (%s; %d B payloads)\n\n", time.Now().UTC().Format("2006-01-02"), size)
	fmt.Printf("| published | delivered | elapsed | sidecar mallocs | idle mallocs (same time) | per published message | per delivery | target |\n|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| %d | %d | %s | %.0f | %.0f | %.4f | %.4f | ≤ 0.01: %s |\n\n", c.published, c.delivered, elapsed.Round(time.Millisecond), busy, idle,
		perMsg, (busy-idle)/float64(c.delivered), gobench.Verdict(perMsg <= 0.01))
	fmt.Println("The mix, per round: PUB and HPUB to a fan-out of three SUBs, PUB to a queue group of two, a request and its reply, PUB from an echo:false connection with one other SUB.")
	return nil
}

func scrape(url string) (float64, error) {
	m, err := benchharness.Scrape(url)
	if err != nil {
		return 0, err
	}
	v, ok := m[mallocs]
	if !ok {
		return 0, fmt.Errorf("%s has no %s", url, mallocs)
	}
	return v, nil
}

// mix is the clients of one sidecar.
type mix struct {
	pub, echoPub *nats.Conn
	conns        []*nats.Conn
	payload      []byte
	header       nats.Header
	delivered    chan struct{}
}

// perRound is what one round publishes (replies included) and delivers.
const (
	publishedPerRound = 6 // PUB, HPUB, queue PUB, request, reply, echo PUB
	deliveredPerRound = 10
)

func newMix(url string, size int) (*mix, error) {
	m := &mix{payload: make([]byte, size), header: nats.Header{"Trace": {"alloc-bench"}}, delivered: make(chan struct{}, 1<<16)}
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		nc, err := nats.Connect(url, append([]nats.Option{nats.NoReconnect()}, opts...)...)
		if err == nil {
			m.conns = append(m.conns, nc)
		}
		return nc, err
	}
	var err error
	if m.pub, err = connect(); err != nil {
		return nil, err
	}
	if m.echoPub, err = connect(nats.NoEcho()); err != nil {
		return nil, err
	}
	count := func(*nats.Msg) { m.delivered <- struct{}{} }
	subs, err := connect()
	if err != nil {
		return nil, err
	}
	for range 3 {
		if _, err := subs.Subscribe("fan.x", count); err != nil {
			return nil, err
		}
	}
	for range 2 {
		if _, err := subs.QueueSubscribe("work.x", "workers", count); err != nil {
			return nil, err
		}
	}
	if _, err := subs.Subscribe("echo.x", count); err != nil {
		return nil, err
	}
	if _, err := m.echoPub.Subscribe("echo.x", count); err != nil { // suppressed: echo:false
		return nil, err
	}
	responder, err := connect()
	if err != nil {
		return nil, err
	}
	if _, err := responder.Subscribe("svc.x", func(msg *nats.Msg) {
		m.delivered <- struct{}{}
		_ = msg.Respond(msg.Data)
	}); err != nil {
		return nil, err
	}
	for _, nc := range m.conns {
		if err := nc.Flush(); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *mix) close() {
	for _, nc := range m.conns {
		nc.Close()
	}
}

// rounds runs rounds until at least n messages were published, waiting for
// every delivery of each batch so that no queue grows.
func (m *mix) rounds(n int) (counts, error) {
	var c counts
	const batch = 100 // rounds between waits
	for c.published < int64(n) {
		for range batch {
			if err := errors.Join(
				m.pub.Publish("fan.x", m.payload),
				m.pub.PublishMsg(&nats.Msg{Subject: "fan.x", Header: m.header, Data: m.payload}),
				m.pub.Publish("work.x", m.payload),
				m.echoPub.Publish("echo.x", m.payload),
			); err != nil {
				return c, err
			}
			if _, err := m.pub.Request("svc.x", m.payload, 5*time.Second); err != nil {
				return c, fmt.Errorf("a request: %w", err)
			}
			c.published += publishedPerRound
		}
		// Deliveries per round: 3+3 fan-out, 1 queue, 1 request to the
		// responder, 1 echo (the other SUB), plus the reply, which the
		// requester's inbox receives (Request counted it by returning).
		for range batch * (deliveredPerRound - 1) {
			select {
			case <-m.delivered:
			case <-time.After(10 * time.Second):
				return c, errors.New("a delivery did not arrive within 10s")
			}
		}
		c.delivered += batch * deliveredPerRound
	}
	return c, nil
}
