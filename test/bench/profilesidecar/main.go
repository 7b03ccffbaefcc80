// Command profilesidecar is `make profile-sidecar`: where a message's time
// goes in the sidecar. It starts a broker and two sidecars (the
// publisher's and the subscriber's) as their own processes with
// -debug-pprof, sends open-loop load from one application through both,
// takes a CPU profile of each sidecar during the load, and prints each
// profile's time per message, split into what the time was spent on
// (socket system calls, the scheduler, the garbage collector, parsing,
// policy, ...), by each function's own (flat) samples.
//
// The same command profiles an older binary (-bin), so that a before and
// an after come from one harness and one load.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/pprof/profile"

	"github.com/weighstation/weighstation/loadgen"
	"github.com/weighstation/weighstation/test/bench/harness"
)

func main() {
	bin := flag.String("bin", "bin/weighstation", "the weighstation binary: the broker, the load, and the sidecars unless -sidecar-bin")
	sidecarBin := flag.String("sidecar-bin", "", "the injected sidecar binary (weighstation-sidecar) to profile; empty: `weighstation sidecar` from -bin")
	rate := flag.Float64("rate", 10_000, "messages per second")
	size := flag.Int("size", 1024, "payload bytes")
	duration := flag.Duration("duration", 34*time.Second, "the load's length; each profile covers all of it but the first and last 2 s")
	out := flag.String("out", "", "directory for the raw profiles (publisher.pprof, subscriber.pprof; none when empty)")
	top := flag.Int("top", 12, "functions listed per profile, by own time")
	flag.Parse()
	if err := run(benchharness.Binaries{Weighstation: *bin, Sidecar: *sidecarBin}, *rate, *size, *duration, *out, *top); err != nil {
		fmt.Fprintln(os.Stderr, "profile-sidecar:", err)
		os.Exit(1)
	}
}

func run(bins benchharness.Binaries, rate float64, size int, duration time.Duration, out string, top int) error {
	const margin = 2 * time.Second
	if duration <= 2*margin+time.Second {
		return fmt.Errorf("-duration %s: must be over %s (the profile leaves %s at each end)", duration, 2*margin+time.Second, margin)
	}
	mesh, err := benchharness.StartMesh(bins, 2, benchharness.PassThroughPodConfig, "-debug-pprof")
	if err != nil {
		return err
	}
	defer mesh.Stop()

	seconds := int((duration - 2*margin) / time.Second)
	type fetched struct {
		p   *profile.Profile
		err error
	}
	results := make([]chan fetched, 2)
	cfg := loadgen.DefaultConfig
	cfg.URL, cfg.SubURL = mesh.SidecarURLs[0], mesh.SidecarURLs[1]
	cfg.Subject, cfg.Rate, cfg.Size, cfg.Duration = "bench.profile", rate, size, duration
	loadDone := make(chan struct{})
	var summary loadgen.Summary
	var loadErr error
	go func() {
		defer close(loadDone)
		res, err := loadgen.Run(context.Background(), cfg)
		if err != nil {
			loadErr = err
			return
		}
		summary = res.Summary()
	}()
	time.Sleep(margin) // the profile starts once the load is steady
	for i, metrics := range mesh.MetricsURLs {
		results[i] = make(chan fetched, 1)
		url := strings.TrimSuffix(metrics, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)
		go func() {
			p, err := fetchProfile(url, time.Duration(seconds)*time.Second+30*time.Second)
			results[i] <- fetched{p, err}
		}()
	}
	profiles := make([]*profile.Profile, 2)
	for i := range results {
		f := <-results[i]
		if f.err != nil {
			return f.err
		}
		profiles[i] = f.p
	}
	<-loadDone
	if loadErr != nil {
		return loadErr
	}
	if summary.Received != summary.Sent {
		return fmt.Errorf("sent %d, received %d: the load was more than the sidecars carry; lower -rate", summary.Sent, summary.Received)
	}
	messages := rate * float64(seconds)
	fmt.Printf("%s: %d B at %.0f/s, profiles over %d s (%.0f messages), p50 %d µs, p99 %d µs\n",
		bins.SidecarName(), size, rate, seconds, messages, summary.Corrected.Percentiles["50"], summary.Corrected.Percentiles["99"])
	for i, name := range []string{"publisher", "subscriber"} {
		p := profiles[i]
		if out != "" {
			if err := writeProfile(filepath.Join(out, name+".pprof"), p); err != nil {
				return err
			}
		}
		fmt.Printf("\n%s's sidecar:\n", name)
		printBreakdown(p, messages, top)
	}
	return nil
}

func fetchProfile(url string, timeout time.Duration) (*profile.Profile, error) {
	client := http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("fetching the CPU profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("fetching the CPU profile: %s: %s (was the sidecar started with -debug-pprof?)", resp.Status, body)
	}
	p, err := profile.Parse(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parsing the CPU profile: %w", err)
	}
	return p, nil
}

func writeProfile(path string, p *profile.Profile) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	return errors.Join(p.Write(f), f.Close())
}

// A category is what a function's own time was spent on, by the function's
// name; the first that matches wins.
type category struct {
	name string
	re   *regexp.Regexp
}

var categories = []category{
	{"socket reads and writes (system calls)", regexp.MustCompile(`^(syscall\.|internal/poll\.|golang.org/x/sys/unix\.|github.com/weighstation/weighstation/sidecar/rawsock\.)`)},
	{"garbage collection", regexp.MustCompile(`^runtime\.(gc|scanobject|greyobject|markBits|findObject|scanblock|wbBuf|bulkBarrier|sweep|mSpan_Sweep|(\(\*mspan\)\.sweep)|(\(\*gcWork\))|(\(\*gcControllerState\))|(\(\*sweepLocked\)))`)},
	{"allocation", regexp.MustCompile(`^runtime\.(mallocgc|memclrNoHeapPointers|nextFreeFast|(\(\*mcache\))|(\(\*mcentral\))|(\(\*mheap\))|newobject|makeslice|growslice|rawstring|slicebytetostring|concatstring)`)},
	{"scheduler, timers and network poller", regexp.MustCompile(`^runtime\.(futex|schedule|findRunnable|netpoll|epoll|park_m|mcall|gopark|goready|ready|runqget|runqput|runqsteal|stealWork|notesleep|notewakeup|wakep|startm|stopm|(\(\*timers\))|checkTimers|nanotime|usleep|osyield|mPark|lock2|unlock2|casgstatus|execute|gogo|resetspinning|selectgo|chansend|chanrecv|semacquire|semrelease|procyield|(\(\*lfstack\)))`)},
	{"NATS protocol: parse and write (sidecar/protocol, sidecar/upstream, nats.go)", regexp.MustCompile(`(weighstation/sidecar/protocol\.|weighstation/sidecar/upstream\.|nats-io/nats\.go)`)},
	{"headers and stamping", regexp.MustCompile(`(weighstation/sidecar\.(validHeader|stripReserved|appendStamp|appendOrigin|isNoResponders|versionLineEnd|originConn)|net/http\.|net/textproto\.)`)},
	{"policy, access and routing (sidecar, policy, matcher, pending)", regexp.MustCompile(`(weighstation/sidecar/policy\.|weighstation/matcher\.|weighstation/sidecar/pending\.|weighstation/sidecar\.|golang.org/x/time/rate\.)`)},
	{"latency histograms", regexp.MustCompile(`(HdrHistogram|hdrhistogram|weighstation/sidecar/latency\.)`)},
	{"memory copies and other runtime", regexp.MustCompile(`^(runtime\.|internal/|sync\.|sync/atomic\.|time\.)`)},
}

// printBreakdown prints the profile's CPU time per message by category and
// its top functions by own time.
func printBreakdown(p *profile.Profile, messages float64, top int) {
	valueIndex := len(p.SampleType) - 1 // cpu nanoseconds
	byFunc := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		if len(s.Location) == 0 || len(s.Location[0].Line) == 0 {
			continue
		}
		name := attributed(s)
		byFunc[name] += s.Value[valueIndex]
		total += s.Value[valueIndex]
	}
	byCategory := map[string]int64{}
	for name, v := range byFunc {
		byCategory[categorize(name)] += v
	}
	perMsg := func(v int64) float64 { return float64(v) / 1e3 / messages }
	fmt.Printf("  CPU %.2f µs per message (%.1f%% of a core)\n", perMsg(total), 100*float64(total)/float64(p.DurationNanos))
	for _, n := range largestFirst(byCategory) {
		fmt.Printf("  %6.2f µs %5.1f%%  %s\n", perMsg(byCategory[n]), 100*float64(byCategory[n])/float64(max(total, 1)), n)
	}
	funcs := largestFirst(byFunc)
	fmt.Printf("  top functions by own time:\n")
	for _, f := range funcs[:min(top, len(funcs))] {
		fmt.Printf("    %5.1f%%  %s\n", 100*float64(byFunc[f])/float64(max(total, 1)), f)
	}
}

// syscallStub matches the runtime's raw system call entry points, which
// every system call goes through: the socket's reads and writes as much as
// the network poller's epoll_wait.
var syscallStub = regexp.MustCompile(`^(internal/runtime/syscall/|runtime/internal/syscall\.|syscall\.(Syscall|Syscall6|RawSyscall|RawSyscall6|rawSyscallNoError|syscall|rawsyscall)$)`)

// attributed is the function a sample's time counts to: the leaf's
// innermost inlined function, or for a raw system call the first caller
// that says which call it was.
func attributed(s *profile.Sample) string {
	leaf := s.Location[0].Line[0].Function.Name
	if !syscallStub.MatchString(leaf) {
		return leaf
	}
	for _, loc := range s.Location {
		for _, line := range loc.Line {
			if name := line.Function.Name; !syscallStub.MatchString(name) {
				return name
			}
		}
	}
	return leaf
}

func categorize(function string) string {
	for _, c := range categories {
		if c.re.MatchString(function) {
			return c.name
		}
	}
	return "other"
}

// largestFirst is m's keys by their values, largest first.
func largestFirst(m map[string]int64) []string {
	return slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(m[b], m[a]) })
}
