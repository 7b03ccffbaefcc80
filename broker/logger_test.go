package broker_test

import (
	"strings"
	"testing"

	"github.com/go-logr/logr/funcr"

	"github.com/weighstation/weighstation/broker"
)

// TestLoggerMapsNATSLevels: each of nats-server's levels becomes a logr
// line of the matching kind, shown only at the verbosity that admits it,
// and a fatal error reaches the command instead of exiting.
func TestLoggerMapsNATSLevels(t *testing.T) {
	tests := []struct {
		name      string
		verbosity int
		log       func(l *broker.Logger)
		want      string // "" for no line
		fatal     string
	}{
		{"notice", 0, func(l *broker.Logger) { l.Noticef("Listening on %s", "0.0.0.0:4222") }, `"level"=0 "msg"="Listening on 0.0.0.0:4222"`, ""},
		{"warning", 0, func(l *broker.Logger) { l.Warnf("slow consumer %d", 7) }, `"msg"="slow consumer 7" "severity"="warning"`, ""},
		{"error", 0, func(l *broker.Logger) { l.Errorf("bad %s", "thing") }, `"msg"="bad thing" "error"=null`, ""},
		{"fatal", 0, func(l *broker.Logger) { l.Fatalf("Error listening on port: %d", 4222) }, `"msg"="Error listening on port: 4222" "error"=null "severity"="fatal"`, "Error listening on port: 4222"},
		{"debug, off", 0, func(l *broker.Logger) { l.Debugf("details") }, "", ""},
		{"debug, on", 1, func(l *broker.Logger) { l.Debugf("details") }, `"level"=1 "msg"="details"`, ""},
		{"trace, off at debug", 1, func(l *broker.Logger) { l.Tracef("<<- [PUB x 1]") }, "", ""},
		{"trace, on", 2, func(l *broker.Logger) { l.Tracef("<<- [PUB x 1]") }, `"level"=2 "msg"="<<- [PUB x 1]"`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var lines []string
			log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: tc.verbosity})
			var fatal error
			tc.log(broker.NewLogger(log, func(err error) { fatal = err }))
			switch {
			case tc.want == "" && len(lines) != 0:
				t.Errorf("logged %q, want nothing at verbosity %d", lines, tc.verbosity)
			case tc.want != "" && (len(lines) != 1 || !strings.Contains(lines[0], tc.want)):
				t.Errorf("logged %q, want one line with %s", lines, tc.want)
			}
			if got := errMsg(fatal); got != tc.fatal {
				t.Errorf("fatal error %q, want %q", got, tc.fatal)
			}
		})
	}
}

func errMsg(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
