package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

func TestParseDialFlags(t *testing.T) {
	o, err := parseDialFlags([]string{"-addr", "a:1,b:2", "-addr=c:3", "-timeout=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.addrs) != 3 || o.addrs[2] != "c:3" || o.timeout != 2*time.Second {
		t.Errorf("got %v, timeout %s", o.addrs, o.timeout)
	}
	for _, bad := range [][]string{nil, {"-addr", "nohostport"}, {"-addr", "a:1", "-interval", "0s"}} {
		if _, err := parseDialFlags(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// TestDialOutcomes: a NATS server greets the dial with INFO; a closed port
// refuses it; a listener that says nothing leaves it connected without
// INFO; an unknown name is an error, not a refusal.
func TestDialOutcomes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server")
	}
	srv := natstest.StartBroker(t, nil)
	closed := natstest.FreeAddr(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	natsAddr := srv.Addr().String()

	for _, tc := range []struct{ addr, want string }{
		{natsAddr, probestats.DialInfo},
		{closed, probestats.DialRefused},
		{silent.Addr().String(), probestats.DialConnected},
		{"no-such-host.invalid:4222", probestats.DialError},
	} {
		outcome, _, err := dialOnce(context.Background(), tc.addr, 300*time.Millisecond)
		if outcome != tc.want {
			t.Errorf("%s: %s (%v), want %s", tc.addr, outcome, err, tc.want)
		}
		if (err == nil) != (outcome == probestats.DialInfo) {
			t.Errorf("%s: outcome %s with error %v", tc.addr, outcome, err)
		}
	}

	// Rounds count every target and are reported as the stories read them.
	d := newDialer(dialOptions{addrs: addrList{natsAddr, closed}, timeout: 300 * time.Millisecond, id: "t"})
	d.round(context.Background())
	d.round(context.Background())
	line, err := d.stats(true).Line()
	if err != nil {
		t.Fatal(err)
	}
	s, err := probestats.ParseDialStats([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	ok, _ := s.Target(natsAddr)
	refused, _ := s.Target(closed)
	if s.Rounds != 2 || ok.Through() != 2 || ok.FirstThroughUnixNano == 0 || refused.Blocked() != 2 || refused.FirstThroughUnixNano != 0 {
		t.Errorf("report: %+v", s)
	}
	t.Logf("%s\n%s", ok, refused)
}
