// Package logflags is the logging of the sidecar and the broker: the
// -zap-* flags of controller-runtime's pkg/log/zap, with the same names,
// meanings, defaults and output, without controller-runtime.
//
// The sidecar's binary must link no Kubernetes package (Go runs the init of
// every package a binary links, and Kubernetes' cost the sidecar two thirds
// of its idle memory), and controller-runtime's zap package imports
// k8s.io/apimachinery for the one thing the sidecar never logs: Kubernetes
// objects. The flags and the logger are rebuilt here from go.uber.org/zap
// and go-logr/zapr, as controller-runtime builds them (Apache 2.0, v0.25);
// a test checks the two against each other.
package logflags

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Options are the logging flags' values; the zero value is
// controller-runtime's production logging: JSON, info, stack traces from
// errors up, RFC 3339 times, sampling.
type Options struct {
	Development     bool
	newEncoder      func(zapcore.TimeEncoder) zapcore.Encoder
	level           zapcore.LevelEnabler
	stacktraceLevel zapcore.LevelEnabler
	timeEncoder     zapcore.TimeEncoder
	// Out receives the lines; nil: standard error.
	Out io.Writer
	// clock stamps the lines; nil: the system's (tests fix it).
	clock zapcore.Clock
}

// BindFlags adds -zap-devel, -zap-encoder, -zap-log-level,
// -zap-stacktrace-level and -zap-time-encoding to fs, worded as
// controller-runtime words them.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.Development, "zap-devel", o.Development,
		"Development Mode defaults(encoder=consoleEncoder,logLevel=Debug,stackTraceLevel=Warn). "+
			"Production Mode defaults(encoder=jsonEncoder,logLevel=Info,stackTraceLevel=Error)")
	fs.Var(&setter{set: func(v string) error {
		switch strings.ToLower(v) {
		case "json":
			o.newEncoder = jsonEncoder
		case "console":
			o.newEncoder = consoleEncoder
		default:
			return fmt.Errorf("invalid encoder value \"%s\"", v)
		}
		return nil
	}}, "zap-encoder", "Zap log encoding (one of 'json' or 'console')")
	fs.Var(&setter{set: func(v string) error {
		level, ok := levels[strings.ToLower(v)]
		if !ok {
			// A positive integer n is logr's verbosity n, zap's level -n.
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("invalid log level \"%s\"", v)
			}
			level = zapcore.Level(int8(-n))
		}
		o.level = zap.NewAtomicLevelAt(level)
		return nil
	}}, "zap-log-level",
		"Zap Level to configure the verbosity of logging. Can be one of 'debug', 'info', 'error', 'panic'"+
			" or any integer value > 0 which corresponds to custom debug levels of increasing verbosity")
	fs.Var(&setter{set: func(v string) error {
		level, ok := levels[strings.ToLower(v)]
		if !ok || level == zap.DebugLevel {
			return fmt.Errorf("invalid stacktrace level \"%s\"", v)
		}
		o.stacktraceLevel = zap.NewAtomicLevelAt(level)
		return nil
	}}, "zap-stacktrace-level",
		"Zap Level at and above which stacktraces are captured (one of 'info', 'error', 'panic').")
	fs.Var(&setter{set: func(v string) error {
		enc, ok := timeEncoders[strings.ToLower(v)]
		if !ok {
			return fmt.Errorf("invalid time-encoding value \"%s\"", v)
		}
		o.timeEncoder = enc
		return nil
	}}, "zap-time-encoding", "Zap time encoding (one of 'epoch', 'millis', 'nano', 'iso8601', 'rfc3339' or 'rfc3339nano'). Defaults to 'epoch'.")
}

// BindGroup binds the flags to fs as BindFlags does, and lists them apart
// in fs's usage (-h) under "Logging": the flag package has no groups, and
// they would otherwise be interleaved alphabetically with the command's
// own.
func (o *Options) BindGroup(fs *flag.FlagSet) {
	group := flag.NewFlagSet(fs.Name()+" logging", flag.ContinueOnError)
	o.BindFlags(group)
	group.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
		own := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		fs.VisitAll(func(f *flag.Flag) {
			if group.Lookup(f.Name) == nil {
				own.Var(f.Value, f.Name, f.Usage)
			}
		})
		own.SetOutput(out)
		own.PrintDefaults()
		fmt.Fprintf(out, "\nLogging:\n")
		group.SetOutput(out)
		group.PrintDefaults()
	}
}

// New is the logger the flags describe.
func (o Options) New() logr.Logger {
	out := o.Out
	if out == nil {
		out = os.Stderr
	}
	// Development's defaults, else production's, where a flag left a value
	// unset.
	newEncoder, level, stacktrace := jsonEncoder, zapcore.LevelEnabler(zap.InfoLevel), zapcore.LevelEnabler(zap.ErrorLevel)
	var zapOpts []zap.Option
	if o.Development {
		newEncoder, level, stacktrace = consoleEncoder, zap.DebugLevel, zap.WarnLevel
		zapOpts = append(zapOpts, zap.Development())
	}
	if o.newEncoder != nil {
		newEncoder = o.newEncoder
	}
	if o.level != nil {
		level = o.level
	}
	if o.stacktraceLevel != nil {
		stacktrace = o.stacktraceLevel
	}
	// The sampler indexes its counters by level and breaks below debug:
	// controller-runtime samples in production only, and only above.
	if !o.Development && !level.Enabled(zapcore.Level(-2)) {
		zapOpts = append(zapOpts, zap.WrapCore(func(core zapcore.Core) zapcore.Core {
			return zapcore.NewSamplerWithOptions(core, time.Second, 100, 100)
		}))
	}
	timeEncoder := o.timeEncoder
	if timeEncoder == nil {
		timeEncoder = zapcore.RFC3339TimeEncoder
	}
	sink := zapcore.AddSync(out)
	zapOpts = append(zapOpts, zap.AddStacktrace(stacktrace), zap.ErrorOutput(sink))
	if o.clock != nil {
		zapOpts = append(zapOpts, zap.WithClock(o.clock))
	}
	core := zapcore.NewCore(newEncoder(timeEncoder), sink, level)
	return zapr.NewLogger(zap.New(core).WithOptions(zapOpts...))
}

// jsonEncoder and consoleEncoder are zap's production and development
// encoders, with the time encoding of -zap-time-encoding.
func jsonEncoder(t zapcore.TimeEncoder) zapcore.Encoder {
	cfg := zap.NewProductionEncoderConfig()
	cfg.EncodeTime = t
	return zapcore.NewJSONEncoder(cfg)
}

func consoleEncoder(t zapcore.TimeEncoder) zapcore.Encoder {
	cfg := zap.NewDevelopmentEncoderConfig()
	cfg.EncodeTime = t
	return zapcore.NewConsoleEncoder(cfg)
}

var levels = map[string]zapcore.Level{
	"debug": zap.DebugLevel,
	"info":  zap.InfoLevel,
	"error": zap.ErrorLevel,
	"panic": zap.PanicLevel,
}

var timeEncoders = map[string]zapcore.TimeEncoder{
	"rfc3339nano": zapcore.RFC3339NanoTimeEncoder,
	"rfc3339":     zapcore.RFC3339TimeEncoder,
	"iso8601":     zapcore.ISO8601TimeEncoder,
	"millis":      zapcore.EpochMillisTimeEncoder,
	"nanos":       zapcore.EpochNanosTimeEncoder,
	"epoch":       zapcore.EpochTimeEncoder,
}

// setter is a flag.Value that prints the value it was last set to (empty
// by default, as controller-runtime's, so -h shows no default).
type setter struct {
	set   func(string) error
	value string
}

func (s *setter) String() string { return s.value }

func (s *setter) Set(v string) error {
	if err := s.set(v); err != nil {
		return err
	}
	s.value = v
	return nil
}
