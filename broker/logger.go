package broker

import (
	"errors"
	"fmt"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats-server/v2/server"
)

// Logger routes nats-server's log through logr, so that the broker logs
// like the operator and the sidecar: one format (JSON by default, chosen by
// the same -zap-* flags), with a logger name and levels.
//
// nats-server's notices are info lines, its warnings info lines marked
// "severity":"warning" (logr has no warning level), its errors error lines,
// its debug lines at V(1) and its protocol traces at V(2), each enabled
// only when the logger's level admits them (Options for SetLoggerV2).
type Logger struct {
	log   logr.Logger
	fatal func(error)
}

var _ server.Logger = (*Logger)(nil)

// NewLogger returns a Logger writing to log. nats-server's own logger exits
// the process on a fatal error (a port it cannot listen on, say), and the
// server goes on as if it had: fatal, when not nil, is called with the
// error instead, so that the command can stop with it.
func NewLogger(log logr.Logger, fatal func(error)) *Logger {
	return &Logger{log: log, fatal: fatal}
}

// Configure makes l the server's logger, with debug and trace lines on
// when l's level admits them.
func (l *Logger) Configure(s *server.Server) {
	s.SetLoggerV2(l, l.log.V(1).Enabled(), l.log.V(2).Enabled(), false)
}

// Noticef logs an info line.
func (l *Logger) Noticef(format string, v ...any) { l.log.Info(fmt.Sprintf(format, v...)) }

// Warnf logs an info line marked as a warning.
func (l *Logger) Warnf(format string, v ...any) {
	l.log.Info(fmt.Sprintf(format, v...), "severity", "warning")
}

// Errorf logs an error line.
func (l *Logger) Errorf(format string, v ...any) { l.log.Error(nil, fmt.Sprintf(format, v...)) }

// Fatalf logs an error line and hands the error to the command.
func (l *Logger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.log.Error(nil, msg, "severity", "fatal")
	if l.fatal != nil {
		l.fatal(errors.New(msg))
	}
}

// Debugf logs at V(1).
func (l *Logger) Debugf(format string, v ...any) { l.log.V(1).Info(fmt.Sprintf(format, v...)) }

// Tracef logs at V(2).
func (l *Logger) Tracef(format string, v ...any) { l.log.V(2).Info(fmt.Sprintf(format, v...)) }
