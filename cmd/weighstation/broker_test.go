package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/weighstation/weighstation/broker"
	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/internal/proctest"
)

// TestBrokerLogsLikeTheOtherCommands: the broker's lines, nats-server's
// included, are JSON by default, as the operator's and the sidecar's are,
// and -zap-encoder chooses another format for all of them alike.
func TestBrokerLogsLikeTheOtherCommands(t *testing.T) {
	tests := []struct {
		name string
		args []string
		json bool
	}{
		{"by default", nil, true},
		{"console", []string{"-zap-encoder", "console"}, false},
	}
	token := proctest.TokenFile(t, "s3cret")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr := natstest.FreeAddr(t)
			broker := proctest.Start(t, exec.Command(buildBinary(t), append([]string{"broker", "-listen", addr, "-token-file", token}, tc.args...)...))
			waitForWithin(t, 30*time.Second, "the broker serves", func() error {
				nc, err := nats.Connect("nats://"+addr, nats.Token("s3cret"))
				if err == nil {
					nc.Close()
				}
				return err
			})
			logs, err := broker.StopAndWait(t, 30*time.Second)
			if err != nil {
				t.Fatalf("exited with %v after SIGTERM, want 0:\n%s", err, logs)
			}
			natsLines := 0
			for line := range strings.Lines(logs) {
				var entry struct{ Level, Logger, Msg string }
				isJSON := json.Unmarshal([]byte(line), &entry) == nil
				if isJSON != tc.json {
					t.Fatalf("a line is JSON: %t, want %t: %q", isJSON, tc.json, line)
				}
				if strings.Contains(line, "broker.nats") {
					natsLines++
				}
				if isJSON && (entry.Level == "" || entry.Logger == "" || entry.Msg == "") {
					t.Errorf("a line without level, logger or message: %q", line)
				}
			}
			if natsLines == 0 || !strings.Contains(logs, "Server is ready") {
				t.Fatalf("no nats-server line under the logger broker.nats:\n%s", logs)
			}
		})
	}
	usage, err := exec.Command(buildBinary(t), "broker", "-h").CombinedOutput()
	if err != nil {
		t.Fatalf("broker -h: %v\n%s", err, usage)
	}
	if _, logging, found := strings.Cut(string(usage), "\nLogging:\n"); !found || !strings.Contains(logging, "-zap-encoder") {
		t.Errorf("broker -h does not list the logging flags apart:\n%s", usage)
	}
}

func TestRouteTLSFlagsGoTogether(t *testing.T) {
	tests := []struct {
		name          string
		cert, key, ca string
		clusterListen string
		want          string // "" for accepted
		tls           bool
	}{
		{"none", "", "", "", "0.0.0.0:6222", "", false},
		{"all three", "tls.crt", "tls.key", "ca.crt", "0.0.0.0:6222", "", true},
		{"no CA", "tls.crt", "tls.key", "", "0.0.0.0:6222", "-cluster-tls-ca go together", false},
		{"only the CA", "", "", "ca.crt", "0.0.0.0:6222", "give all three", false},
		{"no cluster", "tls.crt", "tls.key", "ca.crt", "", "need -cluster-listen", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rt, err := routeTLSOptions(broker.RouteTLS{CertFile: tc.cert, KeyFile: tc.key, CAFile: tc.ca}, tc.clusterListen)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want one containing %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (rt != nil) != tc.tls {
				t.Fatalf("route TLS = %+v, want on: %v", rt, tc.tls)
			}
		})
	}
}
