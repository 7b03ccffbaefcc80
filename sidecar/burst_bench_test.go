package sidecar_test

import (
	"bufio"
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
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
func BenchmarkPublishBurst(b *testing.B) {
	const (
		burstBlock    = 64
		roundMessages = 64 * burstBlock
	)
	r := newRig(b)
	cfg := configWith(meshconfig.TopicPolicy{Name: "burst", Subject: "bench.burst", MayPublish: true, StampHeader: true, MaxMessageBytes: 1 << 20})
	cfg.Default.PublishRate = nil
	if err := r.side.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	paths := []*burstPath{
		{name: "direct", addr: strings.TrimPrefix(r.broker.ClientURL(), "nats://")},
		{name: "sidecar", addr: r.side.Addr().String()},
	}
	for _, p := range paths {
		p.dial(b)
	}
	frame := []byte("PUB bench.burst 1024\r\n" + strings.Repeat("x", 1024) + "\r\n")
	block := bytes.Repeat(frame, burstBlock)
	b.SetBytes(1024)
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += roundMessages {
		n := min(roundMessages, b.N-sent)
		for _, p := range paths { // interleaved, so drift hits both alike
			p.round(b, block, len(frame), n)
		}
	}
	b.StopTimer()
	direct, via := paths[0], paths[1]
	perMessage := func(p *burstPath) float64 { return float64(p.cpu.Nanoseconds()) / float64(b.N) }
	b.ReportMetric(perMessage(direct), "direct-cpu-ns/msg")
	b.ReportMetric(perMessage(via), "sidecar-cpu-ns/msg")
	b.ReportMetric(perMessage(via)-perMessage(direct), "added-cpu-ns/msg")
	b.Logf("%d messages per path: CPU per message direct %.0f ns, through the sidecar %.0f ns (%.2fx), the sidecar's part %.0f ns",
		b.N, perMessage(direct), perMessage(via), perMessage(via)/perMessage(direct), perMessage(via)-perMessage(direct))
	if c := r.side.TopicCounters()["burst"]; c.Forwarded < uint64(b.N) {
		b.Fatalf("the sidecar forwarded %d of %d", c.Forwarded, b.N)
	}
}

type burstPath struct {
	name string
	addr string
	conn net.Conn
	in   *bufio.Reader
	cpu  time.Duration
}

func (p *burstPath) dial(b *testing.B) {
	conn, err := net.Dial("tcp", p.addr)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	p.conn, p.in = conn, bufio.NewReader(conn)
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\n")); err != nil {
		b.Fatal(err)
	}
	p.waitPong(b)
}

// round writes n messages in blocks and waits for the PONG after them.
func (p *burstPath) round(b *testing.B, block []byte, frameLen, n int) {
	before := processCPU()
	for sent := 0; sent < n; {
		k := min(len(block)/frameLen, n-sent)
		if _, err := p.conn.Write(block[:k*frameLen]); err != nil {
			b.Fatal(err)
		}
		sent += k
	}
	if _, err := p.conn.Write([]byte("PING\r\n")); err != nil {
		b.Fatal(err)
	}
	p.waitPong(b)
	p.cpu += processCPU() - before
}

// waitPong reads lines until a PONG; the sidecar sends it once the broker
// confirmed everything before the PING.
func (p *burstPath) waitPong(b *testing.B) {
	b.Helper()
	_ = p.conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		line, err := p.in.ReadString('\n')
		if err != nil {
			b.Fatalf("%s: waiting for PONG: %v", p.name, err)
		}
		switch {
		case line == "PONG\r\n":
			return
		case strings.HasPrefix(line, "-ERR"):
			b.Fatalf("%s refused: %s", p.name, line)
		}
	}
}
