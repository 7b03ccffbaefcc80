package sidecar_test

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/weighstation/weighstation/sidecar"
)

// BenchmarkDeliveryBurst is the delivery path under load, against the
// broker alone in the same run: a raw publisher on the broker writes 1 KiB
// messages stamped as a publishing sidecar stamps them (HPUB), deliverBlock
// at a time, and a raw subscriber reads each block, subscribed directly to
// the broker on one path and through the sidecar on the other, in
// interleaved rounds. The process runs the clients, the broker and the
// sidecar, so the difference of the two paths' CPU per message is what the
// sidecar's delivery adds: the broker read, the route, the queue, the write
// to the application, the accounting and the latency histograms (a CPU
// profile, -cpuprofile, splits it). One op is one message on each path.
// BenchmarkPublishToDelivery is the latency of one message at a time.
func BenchmarkDeliveryBurst(b *testing.B) {
	const deliverBlock = 64
	r := newRig(b)
	cfg := configWith()
	cfg.Default.PublishRate = nil
	if err := r.side.SetConfig(cfg); err != nil {
		b.Fatal(err)
	}
	pub := dialRaw(b, strings.TrimPrefix(r.broker.ClientURL(), "nats://"))
	pub.send("CONNECT {\"verbose\":false,\"headers\":true}\r\nPING\r\n")
	(&burstPath{rawClient: pub}).pong()
	direct := &deliveryPath{name: "direct", subject: "bench.deliver.direct"}
	via := &deliveryPath{name: "sidecar", subject: "bench.deliver.sidecar"}
	direct.dial(b, strings.TrimPrefix(r.broker.ClientURL(), "nats://"))
	via.dial(b, r.side.Addr().String())
	paths := []*deliveryPath{direct, via}
	payload := strings.Repeat("x", 1024)
	b.SetBytes(1024)
	b.ResetTimer()
	for sent := 0; sent < b.N; sent += deliverBlock {
		n := min(deliverBlock, b.N-sent)
		for _, p := range paths { // interleaved, so drift hits both alike
			before := processCPU()
			header := "NATS/1.0\r\n" + sidecar.StampHeader + ": " + strconv.FormatInt(time.Now().UnixNano(), 10) + "\r\n\r\n"
			frame := fmt.Sprintf("HPUB %s %d %d\r\n%s%s\r\n", p.subject, len(header), len(header)+len(payload), header, payload)
			pub.send(strings.Repeat(frame, n))
			p.receive(n)
			p.cpu += processCPU() - before
		}
	}
	b.StopTimer()
	d, v := float64(direct.cpu.Nanoseconds())/float64(b.N), float64(via.cpu.Nanoseconds())/float64(b.N)
	b.ReportMetric(d, "direct-cpu-ns/msg")
	b.ReportMetric(v, "sidecar-cpu-ns/msg")
	b.ReportMetric(v-d, "added-cpu-ns/msg")
}

// deliveryPath is one path's subscriber and the process CPU its rounds
// took.
type deliveryPath struct {
	name, subject string
	*rawClient
	cpu time.Duration
}

func (p *deliveryPath) dial(b *testing.B, addr string) {
	p.rawClient = dialRaw(b, addr)
	p.r = bufio.NewReaderSize(p.conn, 256<<10)
	p.send("CONNECT {\"verbose\":false,\"headers\":true}\r\nSUB " + p.subject + " 1\r\nPING\r\n")
	(&burstPath{rawClient: p.rawClient}).pong()
}

// receive reads n messages, answering the server's PINGs.
func (p *deliveryPath) receive(n int) {
	_ = p.conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	for got := 0; got < n; {
		line, err := p.r.ReadSlice('\n')
		if err != nil {
			p.t.Fatalf("%s: reading: %v after %d of %d messages", p.name, err, got, n)
		}
		switch {
		case bytes.HasPrefix(line, []byte("MSG ")), bytes.HasPrefix(line, []byte("HMSG ")):
			fields := bytes.Fields(line)
			size, err := strconv.Atoi(string(fields[len(fields)-1]))
			if err != nil {
				p.t.Fatalf("%s: %q: %v", p.name, line, err)
			}
			if _, err := p.r.Discard(size + 2); err != nil {
				p.t.Fatalf("%s: reading a body: %v", p.name, err)
			}
			got++
		case bytes.HasPrefix(line, []byte("PING")):
			p.send("PONG\r\n")
		}
	}
}
