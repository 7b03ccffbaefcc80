// Command flood is the hostile side of `make bench-propagation -flood`:
// junk xDS calls at a fixed rate, open loop, against the operator that
// the bench measures, in a process of its own so that its CPU is read
// apart (it shares the machine's cores with everything measured).
//
// Each attempt opens a delta ADS stream with a bearer token and waits for
// the operator's answer: admitted (its accepted header), or the refusal's
// code. Nine attempts in ten carry a forged token: a real pod's token from
// the manifest with its claims changed (a jti of its own), its header and
// signature kept — well-formed, for the xDS audience, unexpired, bound to
// a pod the operator serves, and not signed, so that only a TokenReview
// can tell. Each forged token is another, so that no cache of refusals
// spares the review. The tenth replays one valid token (the first pod's),
// which a cache of reviews answers without one. An admitted stream is
// closed at once.
//
// The attempts go out over -peers HTTP/2 connections, each from a
// loopback address of its own (127.2.0.0/16), as a flood from many hosts
// would: per-peer limits alone do not stop it. A connection the operator
// closes is dialed again by gRPC.
//
// On SIGTERM it writes its counts (Stats, JSON) to -stats and exits.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/weighstation/weighstation/test/bench/propagation/floodproto"
	"github.com/weighstation/weighstation/test/bench/propagation/swarmproto"
)

// acceptedHeader is xds.AcceptedHeader (not imported: the flood links
// nothing of the operator).
const acceptedHeader = "weighstation-accepted-pod"

func main() {
	manifestPath := flag.String("manifest", "", "the bench's manifest (swarmproto.Manifest): the operator's address, its CA, and the pods' tokens")
	rate := flag.Float64("rate", 1000, "attempts per second")
	peers := flag.Int("peers", 64, "connections, each from a loopback address of its own")
	validEvery := flag.Int("valid-every", 10, "every Nth attempt replays the first pod's valid token (0: never)")
	maxInFlight := flag.Int("max-inflight", 4096, "the most attempts waiting for their answer; past it attempts are skipped and counted")
	statsFile := flag.String("stats", "", "where to write the counts (JSON) at SIGTERM")
	flag.Parse()
	if err := run(*manifestPath, *rate, *peers, *validEvery, *maxInFlight, *statsFile); err != nil {
		fmt.Fprintln(os.Stderr, "flood:", err)
		os.Exit(1)
	}
}

type flood struct {
	conns     []*grpc.ClientConn
	claims    []map[string]any
	headSig   [][2]string // each token's header and signature
	valid     string
	inFlight  atomic.Int64
	mu        sync.Mutex
	stats     floodproto.Stats
	answerSum time.Duration
	answerMax time.Duration
	answers   int64
}

func run(manifestPath string, rate float64, peers, validEvery, maxInFlight int, statsFile string) error {
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		return fmt.Errorf("reading the manifest: %w", err)
	}
	var m swarmproto.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("decoding the manifest: %w", err)
	}
	if len(m.Pods) == 0 {
		return errors.New("the manifest has no pods")
	}
	ca, err := os.ReadFile(m.CAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s", m.CAFile)
	}
	creds := credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: m.ServerName, MinVersion: tls.VersionTLS12})
	f := &flood{stats: floodproto.Stats{Rate: rate, Outcomes: map[string]int64{}, Valid: map[string]int64{}, Forged: map[string]int64{}, LastRefusal: map[string]string{}}}
	for _, p := range m.Pods {
		tok, err := os.ReadFile(p.TokenFile)
		if err != nil {
			return err
		}
		parts := strings.Split(strings.TrimSpace(string(tok)), ".")
		if len(parts) != 3 {
			return fmt.Errorf("%s: not a JWT", p.TokenFile)
		}
		payload, err := base64.RawURLEncoding.DecodeString(parts[1])
		if err != nil {
			return err
		}
		var c map[string]any
		if err := json.Unmarshal(payload, &c); err != nil {
			return err
		}
		if f.valid == "" {
			f.valid = strings.TrimSpace(string(tok))
		}
		f.claims = append(f.claims, c)
		f.headSig = append(f.headSig, [2]string{parts[0], parts[2]})
	}
	for k := range peers {
		ip := net.IPv4(127, 2, byte(k/250), byte(k%250+1))
		dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}}
		conn, err := grpc.NewClient(m.XDSAddress, grpc.WithTransportCredentials(creds),
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return dialer.DialContext(ctx, "tcp", addr) }))
		if err != nil {
			return err
		}
		defer conn.Close()
		f.conns = append(f.conns, conn)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var n int64
	var wg sync.WaitGroup
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-tick.C:
		}
		due := int64(rate * time.Since(start).Seconds())
		for ; n < due; n++ {
			if f.inFlight.Load() >= int64(maxInFlight) {
				f.mu.Lock()
				f.stats.Skipped++
				f.mu.Unlock()
				continue
			}
			valid := validEvery > 0 && n%int64(validEvery) == 0
			tok := f.valid
			if !valid {
				tok = f.forge(n)
			}
			f.inFlight.Add(1)
			wg.Add(1)
			go func(n int64) {
				defer wg.Done()
				defer f.inFlight.Add(-1)
				f.attempt(f.conns[n%int64(len(f.conns))], tok, valid)
			}(n)
			f.mu.Lock()
			f.stats.Launched++
			f.mu.Unlock()
		}
	}
	f.stats.Seconds = time.Since(start).Seconds()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.answers > 0 {
		f.stats.AnswerMsAvg = float64(f.answerSum.Microseconds()) / 1000 / float64(f.answers)
	}
	f.stats.AnswerMsMax = float64(f.answerMax.Microseconds()) / 1000
	out, err := json.MarshalIndent(f.stats, "", "  ")
	if err != nil {
		return err
	}
	if statsFile == "" {
		_, err = os.Stdout.Write(append(out, '\n'))
		return err
	}
	return os.WriteFile(statsFile, out, 0o644)
}

// forge is attempt n's forged token: pod n's claims (round robin) with a
// jti of its own, under that token's header and signature.
func (f *flood) forge(n int64) string {
	i := int(n) % len(f.claims)
	c := make(map[string]any, len(f.claims[i])+1)
	for k, v := range f.claims[i] {
		c[k] = v
	}
	c["jti"] = fmt.Sprintf("flood-%d", n)
	b, _ := json.Marshal(c)
	return f.headSig[i][0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + f.headSig[i][1]
}

// attempt opens one stream with token and records the operator's answer.
func (f *flood) attempt(conn *grpc.ClientConn, token string, valid bool) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token), 30*time.Second)
	defer cancel()
	outcome := "admitted"
	st, err := discoverygrpc.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
	if err == nil {
		var header metadata.MD
		if header, err = st.Header(); err == nil && len(header.Get(acceptedHeader)) == 0 {
			_, err = st.Recv()
			if err == nil {
				err = errors.New("answered without admitting")
			}
		}
	}
	if err != nil {
		outcome = status.Code(err).String()
	}
	took := time.Since(start)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stats.Outcomes[outcome]++
	if valid {
		f.stats.Valid[outcome]++
	} else {
		f.stats.Forged[outcome]++
	}
	if err != nil {
		f.stats.LastRefusal[outcome] = status.Convert(err).Message()
	}
	f.answers++
	f.answerSum += took
	f.answerMax = max(f.answerMax, took)
}
