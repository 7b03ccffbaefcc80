package main

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/pending"
	"github.com/weighstation/weighstation/sidecar/upstream"
	"github.com/weighstation/weighstation/test/e2e/probe/probestats"
)

// readsOf reads from c in the background: each read's bytes, then its
// error.
func readsOf(c net.Conn) (<-chan string, <-chan error) {
	data, errs := make(chan string, 16), make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := c.Read(buf)
			if err != nil {
				errs <- err
				return
			}
			data <- string(buf[:n])
		}
	}()
	return data, errs
}

// notWithin fails if ch yields within d.
func notWithin(t *testing.T, what string, ch <-chan string, d time.Duration) {
	t.Helper()
	select {
	case got := <-ch:
		t.Fatalf("%s: read %q", what, got)
	case <-time.After(d):
	}
}

func within(t *testing.T, what string, ch <-chan string, want string) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("%s: read %q, want %q", what, got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing read", what)
	}
}

// TestAPauseHoldsReadsUntilResumedOrOver: a pausing connection reads
// nothing while a pause lasts (but the read already under way as it
// began), reads again when it is resumed or its time runs out (not an
// earlier pause's time, once extended), and a close ends a read that
// waits.
func TestAPauseHoldsReadsUntilResumedOrOver(t *testing.T) {
	p := newPauser()
	app, side := net.Pipe()
	defer side.Close()
	c := &pausingConn{Conn: app, p: p, closed: make(chan struct{})}
	data, errs := readsOf(c)
	write := func(s string) {
		go func() { _, _ = side.Write([]byte(s)) }()
	}

	write("a")
	within(t, "not paused", data, "a")

	p.pause(time.Hour)
	write("b")
	within(t, "the read under way as the pause began", data, "b")
	write("c")
	notWithin(t, "paused", data, 50*time.Millisecond)
	if st := p.resume(); st.Paused || st.Pauses != 1 || st.PausedNanos <= 0 {
		t.Fatalf("resumed: %+v", st)
	}
	within(t, "resumed", data, "c")

	p.pause(50 * time.Millisecond)
	write("d")
	within(t, "the read under way", data, "d")
	write("e")
	within(t, "after the pause's time ran out", data, "e")
	if st := p.stats(); st.Paused || st.Pauses != 2 {
		t.Fatalf("after the second pause: %+v", st)
	}

	// Extended: the first end passes, the pause goes on.
	p.pause(20 * time.Millisecond)
	if st := p.pause(time.Hour); st.Pauses != 3 || !st.Paused {
		t.Fatalf("extended: %+v", st)
	}
	write("f")
	within(t, "the read under way", data, "f")
	write("g")
	notWithin(t, "past the extended pause's first end", data, 100*time.Millisecond)

	_ = c.Close()
	select {
	case err := <-errs:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a waiting read ended with %v, want net.ErrClosed", err)
		}
	case got := <-data:
		t.Fatalf("closed while paused, and read %q", got)
	case <-time.After(5 * time.Second):
		t.Fatal("closing did not end a waiting read")
	}
}

// TestPauseControls: a subscriber serves POST /pause?for=D and POST
// /resume, which answer the pause's state, and its /stats counts them; a
// role that cannot pause has neither.
func TestPauseControls(t *testing.T) {
	o := options{id: "sub", subject: "e2e.stream"}
	sub := newProbe(probestats.RoleSubscriber, o, newRole(probestats.RoleSubscriber, o))
	srv := httptest.NewServer(sub.handler())
	defer srv.Close()
	call := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	state := func(body string) probestats.PauseStats {
		t.Helper()
		var st probestats.PauseStats
		if err := json.Unmarshal([]byte(body), &st); err != nil {
			t.Fatalf("%q: %v", body, err)
		}
		return st
	}

	code, body := call(http.MethodPost, "/pause?for=4m&fill=0")
	if st := state(body); code != http.StatusOK || !st.Paused || st.Pauses != 1 || st.UntilUnixNano == 0 || st.FilledMessages != 0 {
		t.Fatalf("POST /pause?for=4m&fill=0: %d %s", code, body)
	}
	if st := sub.stats(false).Subscriber.Pause; !st.Paused || st.Pauses != 1 {
		t.Fatalf("/stats while paused: %+v", st)
	}
	// Not connected: paused, but no filler (auto by default).
	if code, body := call(http.MethodPost, "/pause?for=4m"); code != http.StatusInternalServerError || !strings.Contains(body, "not connected") {
		t.Errorf("POST /pause unconnected: %d %s, want 500 not connected", code, body)
	}
	if code, body := call(http.MethodPost, "/pause?for=4m&fill=1000"); code != http.StatusInternalServerError || !strings.Contains(body, "not connected") {
		t.Errorf("POST /pause?fill=1000 unconnected: %d %s, want 500 not connected", code, body)
	}
	for _, bad := range []string{"/pause", "/pause?for=1", "/pause?for=10m", "/pause?for=-1s", "/pause?for=1s&fill=lots", "/pause?for=1s&fill=-5"} {
		if code, body := call(http.MethodPost, bad); code != http.StatusBadRequest {
			t.Errorf("POST %s: %d %s, want 400", bad, code, body)
		}
	}
	if code, _ := call(http.MethodGet, "/pause?for=1s"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /pause: %d, want 405", code)
	}
	code, body = call(http.MethodPost, "/resume")
	if st := state(body); code != http.StatusOK || st.Paused || st.Pauses != 1 || st.LastEndUnixNano == 0 {
		t.Fatalf("POST /resume: %d %s", code, body)
	}
	if code, body = call(http.MethodPost, "/resume"); code != http.StatusOK || state(body).Pauses != 1 {
		t.Fatalf("POST /resume again: %d %s", code, body)
	}

	o.rate = 1
	pub := newProbe(probestats.RolePublisher, o, newRole(probestats.RolePublisher, o))
	pubSrv := httptest.NewServer(pub.handler())
	defer pubSrv.Close()
	resp, err := pubSrv.Client().Post(pubSrv.URL+"/pause?for=1s", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a publisher's POST /pause: %s, want 404", resp.Status)
	}
}

// TestAPausedSubscriberLeavesMessagesInItsSidecar runs the subscriber
// against a real sidecar, as the Subscription story (test/e2e, step 4f)
// does on a cluster: paused, with filler in the sockets, it reads nothing
// and what its publisher sends waits in the sidecar's queue. Its
// Subscription is then deleted: what waited moves with the SUB to the
// sidecar's defaults (1,000 messages, DropNewest) and is delivered, and
// what arrives beyond those limits is dropped as overflow, which the
// subscriber sees as exactly that many lost (README.md, Delivery
// semantics).
func TestAPausedSubscriberLeavesMessagesInItsSidecar(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a nats-server and a sidecar")
	}
	const subject, name, defaultQueue = "e2e.stream", "e2e-stream", 1000
	broker := natstest.StartBroker(t, nil)
	// The sidecar as its command assembles it, without endpoints, against
	// a broker without authentication; it serves the defaults until the
	// configuration below.
	opts := sidecarapp.NewOptions()
	opts.Sidecar.Listen, opts.BrokerURL = "127.0.0.1:0", broker.ClientURL()
	opts.BrokerCredentials = &upstream.Credentials{}
	opts.MetricsListen, opts.HealthListen = "", ""
	discard := logr.Discard()
	opts.Logger = &discard
	if q := opts.Sidecar.Queue; q.MaxMessages != defaultQueue || q.Overflow != pending.DropNewest {
		t.Fatalf("the sidecar's default queue is %+v; this test expects %d messages, DropNewest", q, defaultQueue)
	}
	app, err := sidecarapp.New(t.Context(), *opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)
	side := app.Server
	config := func(subs ...meshconfig.SubscriptionPolicy) meshconfig.PodConfig {
		cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
		cfg.Subscriptions = subs
		cfg.Version, _ = meshconfig.Hash(cfg)
		return cfg
	}
	stream := meshconfig.SubscriptionPolicy{Name: name, Subject: subject, Essential: true,
		Limits: meshconfig.Limits{MaxPendingMessages: 10000, MaxPendingBytes: 8 << 20, Overflow: meshconfig.OverflowDropNewest}}
	if err := side.SetConfig(config(stream)); err != nil {
		t.Fatal(err)
	}

	sub, _ := startRole(t, probestats.RoleSubscriber, options{natsURL: "nats://" + side.Addr().String(), id: "sub", subject: subject})
	control := httptest.NewServer(sub.handler())
	defer control.Close()
	post := func(path string) probestats.PauseStats {
		t.Helper()
		resp, err := control.Client().Post(control.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var st probestats.PauseStats
		if err := json.Unmarshal(b, &st); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("POST %s: %s %s", path, resp.Status, b)
		}
		return st
	}
	natstest.WaitFor(t, "the subscriber subscribes", sub.ready)
	pub := natstest.Connect(t, broker.ClientURL()) // another pod's sidecar
	var seq uint64
	publish := func(n int) {
		for range n {
			seq++
			if err := pub.Publish(subject, encode(message{ID: "pub", Run: 1, Seq: seq, SentNano: time.Now().UnixNano()}, 100)); err != nil {
				t.Fatal(err)
			}
		}
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	seen := func() probestats.SubscriberStats { return *sub.stats(false).Subscriber }
	totals := func() pending.Counts {
		var all pending.Counts
		for _, c := range side.PolicyTotals() {
			all = all.Plus(c)
		}
		return all
	}
	dropped := func(c pending.Counts) (n uint64) {
		for _, d := range c.Dropped {
			n += d
		}
		return n
	}
	natstest.WaitFor(t, "the stream flowing", func() bool { publish(1); return seen().Received > 0 })
	natstest.WaitFor(t, "everything published received", func() bool {
		return seen().Publishers["pub"].Highest == seq && totals().Pending == 0 && totals().InFlight == 0
	})
	base, baseSeen := totals(), seen()

	paused := post("/pause?for=1m&fill=auto")
	filler := uint64(paused.FilledMessages)
	if !paused.Paused || filler == 0 || paused.FillLast-paused.FillFirst+1 != filler || paused.FillPublisher != "sub/fill" {
		t.Fatalf("POST /pause?for=1m&fill=auto: %+v", paused)
	}
	natstest.WaitFor(t, "the filler arrived in the sidecar", func() bool { return totals().Arrived == base.Arrived+filler })
	publish(500)
	natstest.WaitFor(t, "500 more arrived in the sidecar", func() bool { return totals().Arrived == base.Arrived+filler+500 })
	read := seen()
	waiting := side.PolicyTotals()[name].Pending
	t.Logf("paused: %d filler message(s) (%d bytes), the subscriber read %d message(s), %d wait in the sidecar",
		filler, paused.FilledBytes, read.Received-baseSeen.Received, waiting)
	if waiting < 500 || waiting >= defaultQueue {
		t.Fatalf("%d wait in the sidecar; want the 500 published after the filler and at most all the filler (%d), under the default queue's %d", waiting, filler, defaultQueue)
	}
	lastBefore := seq

	if err := side.SetConfig(config()); err != nil { // the Subscription deleted
		t.Fatal(err)
	}
	after := side.PolicyTotals()
	if after[name].Pending != 0 || after[""].Pending != waiting {
		t.Fatalf("after the delete %d wait under %s and %d under the default policy; want 0 and the %d that waited", after[name].Pending, name, after[""].Pending, waiting)
	}
	// 1,000 more: the default queue has room for 1,000 - waiting.
	publish(1000)
	natstest.WaitFor(t, "1,000 more arrived in the sidecar", func() bool { return totals().Arrived == base.Arrived+filler+1500 })
	over := side.PolicyTotals()[""].Dropped[pending.ReasonOverflow]
	if over != waiting {
		t.Fatalf("%d dropped as overflow under the default policy, want %d (the 1,000 arrivals beyond its 1,000 less the %d that waited)", over, waiting, waiting)
	}

	if st := post("/resume"); st.Paused || st.Pauses != 1 {
		t.Fatalf("POST /resume: %+v", st)
	}
	natstest.WaitFor(t, "everything delivered", func() bool { return totals().Pending == 0 && totals().InFlight == 0 })
	publish(10) // after the dropped ones: the subscriber sees the gap
	natstest.WaitFor(t, "everything received", func() bool { return seen().Publishers["pub"].Highest == seq })
	end, got := totals(), seen()
	if lost := got.LostIn("pub", read.Publishers["pub"].Highest+1, lastBefore); lost != 0 {
		t.Errorf("%d of the publisher's messages that waited when the Subscription was deleted were lost", lost)
	}
	if lost := got.LostIn(paused.FillPublisher, paused.FillFirst, paused.FillLast); lost != 0 || got.Publishers[paused.FillPublisher].Received != int64(filler) {
		t.Errorf("of the filler, %d lost and %d received, want 0 and %d", lost, got.Publishers[paused.FillPublisher].Received, filler)
	}
	if d := dropped(end) - dropped(base); got.Lost-baseSeen.Lost != int64(d) || d != over {
		t.Errorf("the subscriber lost %d, the sidecar dropped %d (%d as overflow)", got.Lost-baseSeen.Lost, d, over)
	}
	if delivered, received := end.Delivered-base.Delivered, got.Received-baseSeen.Received; uint64(received) != delivered {
		t.Errorf("the sidecar delivered %d, the subscriber received %d", delivered, received)
	}
	if !end.Balanced() {
		t.Errorf("the sidecar's counts do not balance: %+v", end)
	}
	if got.Pause.Pauses != 1 || got.Pause.Paused || got.Pause.PausedNanos <= 0 || got.Pause.FilledMessages != int64(filler) {
		t.Errorf("the subscriber's pause stats: %+v", got.Pause)
	}
}
