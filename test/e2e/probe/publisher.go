package main

import (
	"context"
	"log"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// publisherTick is the finest the publisher's ticker runs; at higher rates
// each tick publishes what fell due since the last.
const publisherTick = time.Millisecond

// publisher publishes open loop: message n is due n/rate after the start,
// whatever happened to the others, so a stall shows as a burst of late
// publishes (MaxBehind) rather than as fewer messages.
type publisher struct {
	o     options
	runID int64

	mu sync.Mutex
	st probestats.PublisherStats
}

func newPublisher(o options) *publisher {
	run := time.Now().UnixNano()
	return &publisher{o: o, runID: run, st: probestats.PublisherStats{RatePerSecond: o.rate, Run: run}}
}

func (p *publisher) run(ctx context.Context, nc *nats.Conn) error {
	period := max(time.Duration(float64(time.Second)/p.o.rate), publisherTick)
	tick := time.NewTicker(period)
	defer tick.Stop()
	start := time.Now()
	var seq uint64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			// The time now, not the tick's: a tick's time may be older than
			// the last one's once the loop falls behind, and an elapsed
			// time that went backwards made due wrap around (the publisher
			// then published as fast as it could: 16 million messages in
			// 40 s on the real node).
			target := uint64(time.Since(start).Seconds() * p.o.rate)
			if target <= seq {
				continue
			}
			due := target - seq
			p.mu.Lock()
			p.st.MaxBehind = max(p.st.MaxBehind, int64(due))
			p.mu.Unlock()
			for range due {
				seq++
				p.publish(nc, seq)
			}
		}
	}
}

func (p *publisher) publish(nc *nats.Conn, seq uint64) {
	err := nc.Publish(p.o.subject, encode(message{ID: p.o.id, Run: p.runID, Seq: seq, SentNano: time.Now().UnixNano()}, p.o.size))
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Published = int64(seq)
	if err != nil {
		p.st.PublishErrors++
		if p.st.LastPublishError != err.Error() {
			log.Printf("publishing #%d: %v", seq, err)
		}
		p.st.LastPublishError = err.Error()
	}
}

func (p *publisher) asyncError(_ *nats.Subscription, err error) bool {
	if kind, _ := classifyRefusal(err.Error()); kind != refusedPublish {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Refusals++
	p.st.LastRefusal = err.Error()
	return true
}

func (p *publisher) fill(s *probestats.Stats) {
	p.mu.Lock()
	st := p.st
	p.mu.Unlock()
	s.Publisher = &st
}

func (p *publisher) ready() bool    { return true }
func (p *publisher) connects() bool { return true }
