package sidecar_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/weighstation/weighstation/internal/natstest"
	"github.com/weighstation/weighstation/sidecar"
)

// TestHealthHandler: /readyz needs a configuration and only reports the
// broker; /livez needs nothing; nothing else is served.
func TestHealthHandler(t *testing.T) {
	tests := []struct {
		name                 string
		configured, brokerUp bool
		path                 string
		wantCode             int
		wantBody             string
	}{
		{name: "ready", configured: true, brokerUp: true, path: "/readyz",
			wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "ready, verbose", configured: true, brokerUp: true, path: "/readyz?verbose",
			wantCode: http.StatusOK, wantBody: "[+]config ok\n[+]broker ok\nreadyz check passed\n"},
		{name: "the broker is not required", configured: true, path: "/readyz",
			wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "but it is reported", configured: true, path: "/readyz?verbose",
			wantCode: http.StatusOK, wantBody: "[+]config ok\n[-]broker disconnected (not required)\nreadyz check passed\n"},
		{name: "the defaults New starts with are no configuration", brokerUp: true, path: "/readyz",
			wantCode: http.StatusServiceUnavailable, wantBody: "[-]config none received yet\n[+]broker ok\nreadyz check failed\n"},
		{name: "nothing yet", path: "/readyz?verbose",
			wantCode: http.StatusServiceUnavailable, wantBody: "[-]config none received yet\n[-]broker disconnected (not required)\nreadyz check failed\n"},
		{name: "live without configuration or broker", path: "/livez",
			wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "no metrics on the probes' address", configured: true, brokerUp: true, path: "/metrics",
			wantCode: http.StatusNotFound, wantBody: "404 page not found\n"},
		{name: "no other probe", configured: true, brokerUp: true, path: "/healthz",
			wantCode: http.StatusNotFound, wantBody: "404 page not found\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			side := sidecarFor(t, tt.brokerUp)
			if tt.configured {
				if err := side.SetConfig(configWith()); err != nil {
					t.Fatal(err)
				}
			}
			srv := httptest.NewServer(side.HealthHandler())
			defer srv.Close()
			resp, err := http.Get(srv.URL + tt.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.wantCode || string(body) != tt.wantBody {
				t.Fatalf("GET %s: %d %q, want %d %q", tt.path, resp.StatusCode, body, tt.wantCode, tt.wantBody)
			}
		})
	}
}

// sidecarFor returns a sidecar (not listening) over a connection to a
// running broker, or to an address where none is yet.
func sidecarFor(t *testing.T, brokerUp bool) *sidecar.Server {
	t.Helper()
	url := "nats://" + natstest.FreeAddr(t)
	if brokerUp {
		url = natstest.StartBroker(t, nil).ClientURL()
	}
	up := natstest.DialUpstream(t, url)
	side, err := sidecar.New(up, sidecar.DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(side.Close)
	return side
}
