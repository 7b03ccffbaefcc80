package logflags

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/zap"
	crzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// fixedClock stamps every line with one time, so that two loggers' lines
// compare byte for byte.
type fixedClock struct{}

func (fixedClock) Now() time.Time                         { return time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC) }
func (fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// TestLikeControllerRuntime: for each command line, the flags accept and
// refuse what controller-runtime's accept and refuse, and the logger writes
// the same bytes, so that the sidecar and the broker log as they did with
// controller-runtime and as the operator does.
func TestLikeControllerRuntime(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"production defaults", nil},
		{"console", []string{"-zap-encoder", "console"}},
		{"json, upper case", []string{"-zap-encoder", "JSON"}},
		{"development", []string{"-zap-devel"}},
		{"development in JSON at info", []string{"-zap-devel", "-zap-encoder", "json", "-zap-log-level", "info"}},
		{"debug", []string{"-zap-log-level", "debug"}},
		{"verbosity 2: no sampling", []string{"-zap-log-level", "2"}},
		{"errors only", []string{"-zap-log-level", "error"}},
		{"stack traces from info", []string{"-zap-stacktrace-level", "info"}},
		{"epoch times", []string{"-zap-time-encoding", "epoch"}},
		{"iso8601 times", []string{"-zap-time-encoding", "iso8601"}},
		{"millis times", []string{"-zap-time-encoding", "millis"}},
		{"a bad encoder", []string{"-zap-encoder", "xml"}},
		{"a bad level", []string{"-zap-log-level", "0"}},
		{"a bad stack trace level", []string{"-zap-stacktrace-level", "debug"}},
		{"a bad time encoding", []string{"-zap-time-encoding", "nano"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var theirs crzap.Options
			theirFlags := flag.NewFlagSet("x", flag.ContinueOnError)
			theirFlags.SetOutput(io.Discard)
			theirs.BindFlags(theirFlags)
			theirErr := theirFlags.Parse(tc.args)

			var ours Options
			ourFlags := flag.NewFlagSet("x", flag.ContinueOnError)
			ourFlags.SetOutput(io.Discard)
			ours.BindFlags(ourFlags)
			ourErr := ourFlags.Parse(tc.args)

			if errString(ourErr) != errString(theirErr) {
				t.Fatalf("parsing %q: error %v, controller-runtime's %v", tc.args, ourErr, theirErr)
			}
			if theirErr != nil {
				return
			}
			var theirOut, ourOut bytes.Buffer
			theirs.DestWriter = &theirOut
			theirs.ZapOpts = append(theirs.ZapOpts, zap.WithClock(fixedClock{}))
			ours.Out, ours.clock = &ourOut, fixedClock{}
			// From one line, so that the stack traces match too.
			for _, log := range []logr.Logger{crzap.New(crzap.UseFlagOptions(&theirs)), ours.New()} {
				logSome(log.WithName("sidecar"))
			}
			if ourOut.String() != theirOut.String() {
				t.Fatalf("logged:\n%s\ncontroller-runtime logged:\n%s", &ourOut, &theirOut)
			}
			if ourOut.Len() == 0 {
				t.Fatal("logged nothing")
			}
		})
	}
}

func logSome(log logr.Logger) {
	log.Info("serving", "listen", "127.0.0.1:4222", "n", 3, "d", 1500*time.Millisecond)
	log.V(1).Info("verbose 1")
	log.V(2).Info("verbose 2")
	log.WithName("broker").WithValues("broker", "nats://b:4222").Info("not reachable yet")
	log.Error(errors.New("boom"), "configuration refused", "file", "c.yaml")
	for range 150 { // past the sampler's first 100 a second
		log.Info("repeated")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestUsageLikeControllerRuntime: -h words the flags as controller-runtime
// does.
func TestUsageLikeControllerRuntime(t *testing.T) {
	var theirs crzap.Options
	theirFlags := flag.NewFlagSet("x", flag.ContinueOnError)
	theirs.BindFlags(theirFlags)
	var ours Options
	ourFlags := flag.NewFlagSet("x", flag.ContinueOnError)
	ours.BindFlags(ourFlags)
	var theirUsage, ourUsage bytes.Buffer
	theirFlags.SetOutput(&theirUsage)
	theirFlags.PrintDefaults()
	ourFlags.SetOutput(&ourUsage)
	ourFlags.PrintDefaults()
	if ourUsage.String() != theirUsage.String() {
		t.Fatalf("usage:\n%s\ncontroller-runtime's:\n%s", &ourUsage, &theirUsage)
	}
}

// TestBindGroup: the logging flags parse through the command's flag set,
// and -h lists them apart, after the command's own.
func TestBindGroup(t *testing.T) {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	fs.String("listen", "", "client address")
	var o Options
	o.BindGroup(fs)
	if err := fs.Parse([]string{"-zap-devel", "-listen", ":4222"}); err != nil {
		t.Fatal(err)
	}
	if !o.Development {
		t.Error("-zap-devel through the command's flag set did not set Development")
	}
	var usage bytes.Buffer
	fs.SetOutput(&usage)
	fs.Usage()
	own, logging, found := bytes.Cut(usage.Bytes(), []byte("\nLogging:\n"))
	if !found || !bytes.Contains(own, []byte("-listen")) || bytes.Contains(own, []byte("-zap-")) || !bytes.Contains(logging, []byte("-zap-encoder")) {
		t.Fatalf("-h does not list the logging flags apart:\n%s", &usage)
	}
}
