package sidecar_test

import (
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
)

// BenchmarkPublishToDelivery compares, in one run and in interleaved
// rounds, a 1 KiB message's trip from publish to delivery directly through
// the broker and through the sidecar (publisher and subscriber both behind
// it), with one message in flight at a time: the added cost of the path,
// not a load test (the open-loop comparison is `weighstation bench`).
// Each b.N iteration is one round of roundMessages per path. It reports
// HdrHistogram percentiles and the process's CPU per message (broker,
// sidecar and clients all run in this process, so it includes all of them).
func BenchmarkPublishToDelivery(b *testing.B) {
	const roundMessages = 2000
	r := newRig(b)
	unlimited := configWith()
	unlimited.Default.PublishRate = nil // the benchmark measures the path, not the default quota
	if err := r.side.SetConfig(unlimited); err != nil {
		b.Fatal(err)
	}
	direct := pathUnderTest{name: "direct", pub: natstest.Connect(b, r.broker.ClientURL()), sub: natstest.Connect(b, r.broker.ClientURL())}
	via := pathUnderTest{name: "sidecar", pub: natstest.Connect(b, "nats://"+r.side.Addr().String()), sub: natstest.Connect(b, "nats://"+r.side.Addr().String())}
	paths := []*pathUnderTest{&direct, &via}
	for _, p := range paths {
		p.hist = hdrhistogram.New(1, 10_000_000, 3)
		p.setup(b)
	}
	payload := make([]byte, 1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, p := range paths { // interleaved, so drift hits both alike
			p.round(b, roundMessages, payload)
		}
	}
	b.StopTimer()
	for _, p := range paths {
		h := p.hist
		b.Logf("%-8s p50 %6d us  p99 %6d us  p99.9 %6d us  p99.99 %6d us  max %6d us  cpu %6.1f us/msg  (%d messages)",
			p.name, h.ValueAtQuantile(50), h.ValueAtQuantile(99), h.ValueAtQuantile(99.9), h.ValueAtQuantile(99.99), h.Max(),
			float64(p.cpu.Microseconds())/float64(h.TotalCount()), h.TotalCount())
	}
	d, s := direct.hist, via.hist
	b.Logf("sidecar / direct: p50 %.2fx  p99 %.2fx  p99.9 %.2fx  max %.2fx  cpu/msg %.2fx",
		ratio(s.ValueAtQuantile(50), d.ValueAtQuantile(50)), ratio(s.ValueAtQuantile(99), d.ValueAtQuantile(99)),
		ratio(s.ValueAtQuantile(99.9), d.ValueAtQuantile(99.9)), ratio(s.Max(), d.Max()),
		float64(via.cpu)/float64(direct.cpu))
	b.ReportMetric(float64(s.ValueAtQuantile(50)), "sidecar-p50-us")
	b.ReportMetric(float64(s.ValueAtQuantile(99)), "sidecar-p99-us")
	b.ReportMetric(float64(d.ValueAtQuantile(50)), "direct-p50-us")
	b.ReportMetric(float64(d.ValueAtQuantile(99)), "direct-p99-us")
}

type pathUnderTest struct {
	name     string
	pub, sub *nats.Conn
	received chan int64
	hist     *hdrhistogram.Histogram
	cpu      time.Duration
}

var benchStart = time.Now()

func (p *pathUnderTest) setup(b *testing.B) {
	p.received = make(chan int64, 1)
	subject := "bench." + p.name
	if _, err := p.sub.Subscribe(subject, func(m *nats.Msg) {
		p.received <- int64(time.Since(benchStart)) - int64(binary.LittleEndian.Uint64(m.Data))
	}); err != nil {
		b.Fatal(err)
	}
	if err := p.sub.Flush(); err != nil {
		b.Fatal(err)
	}
}

func (p *pathUnderTest) round(b *testing.B, n int, payload []byte) {
	cpuBefore := processCPU()
	subject := "bench." + p.name
	for range n {
		binary.LittleEndian.PutUint64(payload, uint64(time.Since(benchStart)))
		// nats.go's flusher sends at once; an explicit Flush would add a
		// round trip (through the sidecar, to the broker too) to the path.
		if err := p.pub.Publish(subject, payload); err != nil {
			b.Fatal(err)
		}
		select {
		case ns := <-p.received:
			_ = p.hist.RecordValue(max(ns/1000, 1))
		case <-time.After(5 * time.Second):
			b.Fatalf("%s: a message did not arrive within 5s", p.name)
		}
	}
	p.cpu += processCPU() - cpuBefore
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprintf("getrusage: %v", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ratio(a, b int64) float64 { return float64(a) / float64(max(b, 1)) }
