package sidecar_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/internal/natstest"
)

// TestEchoFalse: a connection that asks for echo:false (nats.NoEcho) does
// not get its own messages back, even though every application of the pod
// shares the sidecar's one upstream connection; the other applications do,
// without any trace of the reserved header. In a queue group the publisher's
// own member is never picked.
func TestEchoFalse(t *testing.T) {
	r := newRig(t)
	quiet := r.app(t, nats.NoEcho())
	loud, outside := r.app(t), r.direct(t)

	quietGot, loudGot, outsideGot := &collector{}, &collector{}, &collector{}
	for _, s := range []struct {
		nc *nats.Conn
		c  *collector
	}{{quiet, quietGot}, {loud, loudGot}, {outside, outsideGot}} {
		if _, err := s.nc.Subscribe("chat.>", s.c.add); err != nil {
			t.Fatal(err)
		}
	}
	quietJobs, loudJobs := &collector{}, &collector{}
	if _, err := quiet.QueueSubscribe("jobs", "workers", quietJobs.add); err != nil {
		t.Fatal(err)
	}
	if _, err := loud.QueueSubscribe("jobs", "workers", loudJobs.add); err != nil {
		t.Fatal(err)
	}
	flush(t, quiet, loud, outside)

	if err := quiet.Publish("chat.from-quiet", []byte("q")); err != nil {
		t.Fatal(err)
	}
	if err := quiet.PublishMsg(&nats.Msg{Subject: "chat.forged", Data: []byte("f"), Header: nats.Header{"weighstation-origin": {"someone.1"}, "Keep": {"me"}}}); err != nil {
		t.Fatal(err)
	}
	if err := loud.Publish("chat.from-loud", []byte("l")); err != nil {
		t.Fatal(err)
	}
	const jobs = 20
	for range jobs {
		if err := quiet.Publish("jobs", []byte("j")); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, quiet, loud)
	natstest.WaitFor(t, "deliveries", func() bool {
		return loudGot.len() == 3 && outsideGot.len() == 3 && quietGot.len() == 1 && loudJobs.len() == jobs
	})
	flush(t, quiet, loud) // anything still on its way would arrive by now

	quietGot.mu.Lock()
	if n, got := len(quietGot.msgs), string(quietGot.msgs[0].Data); n != 1 || got != "l" {
		t.Errorf("the echo:false connection got %d messages (first %q), want only the other application's", n, got)
	}
	quietGot.mu.Unlock()
	if n := quietJobs.len(); n != 0 {
		t.Errorf("the echo:false connection's queue member got %d of its own jobs, want 0", n)
	}
	loudGot.mu.Lock()
	for _, m := range loudGot.msgs {
		want := nats.Header(nil)
		if m.Subject == "chat.forged" {
			want = nats.Header{"Keep": {"me"}}
		}
		if !headersEqual(m.Header, want) {
			t.Errorf("%s arrived with headers %v, want %v", m.Subject, m.Header, want)
		}
	}
	loudGot.mu.Unlock()
	// The queue group's jobs went to the other member, so only the two chat
	// messages were held back.
	if got := r.side.EchoSuppressed(); got != 2 {
		t.Errorf("EchoSuppressed = %d, want 2", got)
	}
	if got := r.side.StrippedStamps(); got != 1 {
		t.Errorf("StrippedStamps = %d, want 1 (the forged origin header)", got)
	}
	if !quiet.IsConnected() {
		t.Fatal("the echo:false connection was closed")
	}
}
