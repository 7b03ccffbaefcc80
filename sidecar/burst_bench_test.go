package sidecar_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar"
)

// BenchmarkPublishBurst is the publish path at saturation, against the
// broker alone in the same run: one raw client per path writes 1 KiB PUBs
// in blocks of burstBlock as fast as they are taken, directly to the broker
// and through the sidecar (stamping on, so each goes up as an HPUB), in
// interleaved rounds; a PING ends each round, answered once the broker has
// every message. With no subscriber the broker only parses. The process
// runs the client, the sidecar and the broker, so the difference of the two
// paths' CPU per message is what the sidecar adds: parse, policy, stamp,
// the copy into the upstream buffer, and the socket read and write (a CPU
// profile, -cpuprofile, splits it). One op is one message on each path.
// The open-loop measures are `weighstation bench` and bench-sidecar.
//
// writes=overlapped runs the sidecar with OverlapUpstreamWrites: the burst
// keeps its reader behind, so it hands every upstream write to the writer
// goroutine.
func BenchmarkPublishBurst(b *testing.B) {
	for _, overlap := range []bool{false, true} {
		name := "writes=inline"
		if overlap {
			name = "writes=overlapped"
		}
		b.Run(name, func(b *testing.B) { benchPublishBurst(b, overlap) })
	}
}

func benchPublishBurst(b *testing.B, overlap bool) {
	const (
		burstBlock    = 64              // messages per write
		roundMessages = 64 * burstBlock // messages between a round's PINGs
	)
	r := newRig(b, func(o *sidecar.Options) { o.OverlapUpstreamWrites = overlap })
	cfg := configWith(meshconfig.TopicPolicy{Name: "burst", Subject: "bench.burst", MayPublish: true, StampHeader: true, MaxMessageBytes: 1 << 20})
	cfg.Default.PublishRate = nil
	if err := r.side.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	direct, via := &burstPath{name: "direct"}, &burstPath{name: "sidecar"}
	direct.dial(b, strings.TrimPrefix(r.broker.ClientURL(), "nats://"))
	via.dial(b, r.side.Addr().String())
	paths := []*burstPath{direct, via}
	frame := []byte("PUB bench.burst 1024\r\n" + strings.Repeat("x", 1024) + "\r\n")
	block := bytes.Repeat(frame, burstBlock)
	b.SetBytes(1024)
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += roundMessages {
		n := min(roundMessages, b.N-sent)
		for _, p := range paths { // interleaved, so drift hits both alike
			p.round(block, len(frame), n)
		}
	}
	b.StopTimer()
	d, v := float64(direct.cpu.Nanoseconds())/float64(b.N), float64(via.cpu.Nanoseconds())/float64(b.N)
	b.ReportMetric(d, "direct-cpu-ns/msg")
	b.ReportMetric(v, "sidecar-cpu-ns/msg")
	b.ReportMetric(v-d, "added-cpu-ns/msg")
	byReader, byWriter := r.side.BrokerWrites()
	handoffs, _ := r.side.PublishHandoffs()
	b.Logf("%d messages per path: CPU per message direct %.0f ns, through the sidecar %.0f ns (%.2fx), the sidecar's part %.0f ns; %d handoffs to the upstream writer, writes to the broker %d by readers and %d by the writer",
		b.N, d, v, v/d, v-d, handoffs, byReader, byWriter)
	if c := r.side.TopicCounters()["burst"]; c.Forwarded < uint64(b.N) {
		b.Fatalf("the sidecar forwarded %d of %d", c.Forwarded, b.N)
	}
}

// burstPath is one path's client and the process CPU its rounds took.
type burstPath struct {
	name string
	*rawClient
	cpu time.Duration
}

func (p *burstPath) dial(b *testing.B, addr string) {
	p.rawClient = dialRaw(b, addr)
	p.send("CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\n")
	p.pong()
}

// round writes n messages in blocks and waits for the PONG after them.
func (p *burstPath) round(block []byte, frameLen, n int) {
	before := processCPU()
	for sent := 0; sent < n; {
		k := min(len(block)/frameLen, n-sent)
		if _, err := p.conn.Write(block[:k*frameLen]); err != nil {
			p.t.Fatalf("%s: writing: %v", p.name, err)
		}
		sent += k
	}
	p.send("PING\r\n")
	p.pong()
	p.cpu += processCPU() - before
}

// pong expects the PONG to the last PING: the sidecar sends it once the
// broker confirmed everything before the PING; a refusal would come first.
// A PING of the server's own (nats-server sends one soon after a client
// connects, to measure the round trip) is answered.
func (p *burstPath) pong() {
	p.t.Helper()
	got := p.line()
	for ; got == "PING"; got = p.line() {
		p.send("PONG\r\n")
	}
	if got != "PONG" {
		p.t.Fatalf("%s: got %q, want PONG", p.name, got)
	}
}
