package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"

	"github.com/weighstation/weighstation/cmd/weighstation-sidecar/sidecarapp"
	"github.com/weighstation/weighstation/controllers/pki"
	"github.com/weighstation/weighstation/controllers/xds"
	"github.com/weighstation/weighstation/internal/envtestsuite"
	"github.com/weighstation/weighstation/internal/tlsreload"
	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/xdsclient"
)

// xdsThroughRotation is the sidecars' side of a rotation: the operator's
// xDS server with TLS from the rotating Authority, one sidecar whose
// stream lives through the whole test, and the CA bundle file that every
// sidecar trusts, refreshed from the Authority as the kubelet refreshes
// the mounted weighstation-ca-bundle ConfigMap.
type xdsThroughRotation struct {
	authority  *pki.Authority
	pub        *xds.Publisher
	addr       string
	bundleFile string
	// longLived has held one stream since the start (Connects counts a
	// reconnect).
	longLived *xdsclient.Client
	engaged   bool
	fresh     int
	// issuers and serials of the xDS serving certificates the fresh
	// sidecars' handshakes met.
	issuers, serials map[string]bool
}

// staticTokens authenticates a fixed token as the one pod: the real
// TokenReview is another test's subject.
type staticTokens struct{ id xds.Identity }

func (s staticTokens) Authenticate(_ context.Context, token string) (xds.Identity, error) {
	if token != "pod-token" {
		return xds.Identity{}, errors.New("unknown token")
	}
	return s.id, nil
}

const (
	rotationNS, rotationPod, rotationUID = "shop", "billing-0", "uid-1"
	// xdsServerName is in the Authority's DNS names (the xDS Service).
	xdsServerName = "weighstation-xds"
)

func rotationConfig(engaged bool) meshconfig.PodConfig {
	cfg := meshconfig.DefaultConfig(meshconfig.DefaultPolicy)
	cfg.Namespace, cfg.Pod = rotationNS, rotationPod
	cfg.Subscriptions = []meshconfig.SubscriptionPolicy{{
		Name: "billing", Subject: "orders.*",
		KillSwitch: meshconfig.KillSwitch{Engaged: engaged, Reason: "rotation test"},
		Limits:     meshconfig.Limits{MaxPendingMessages: 10, MaxPendingBytes: 1 << 20, Overflow: "DropNewest"},
	}}
	cfg.Version, _ = meshconfig.Hash(cfg)
	return cfg
}

func startXDSThroughRotation(ctx context.Context, t *testing.T, authority *pki.Authority) *xdsThroughRotation {
	t.Helper()
	x := &xdsThroughRotation{authority: authority, pub: xds.NewPublisher(testr.New(t), nil), bundleFile: filepath.Join(t.TempDir(), "ca.crt"),
		issuers: map[string]bool{}, serials: map[string]bool{}}
	x.pub.Set(rotationConfig(false), rotationUID)
	x.pub.MarkSynced()
	srv := xds.NewServer(x.pub, xds.NewTracker(), xds.Options{
		Listen: "127.0.0.1:0", TLS: authority.TLSConfig(), Log: testr.New(t),
		Authenticator: staticTokens{xds.Identity{Namespace: rotationNS, Pod: rotationPod, PodUID: rotationUID, Expiry: time.Now().Add(time.Hour)}},
	})
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	t.Cleanup(func() {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("the xDS server ended with %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the xDS server did not stop within 10s")
		}
	})
	addrCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	addr, err := srv.Addr(addrCtx)
	if err != nil {
		t.Fatal(err)
	}
	x.addr = addr.String()
	x.refreshBundle(t)
	x.longLived = x.startSidecar(ctx, t)
	x.waitApplied(t, x.longLived, rotationConfig(false).Version, "the long-lived sidecar's first configuration")
	return x
}

// refreshBundle writes the Authority's bundle where the sidecars read it,
// as the kubelet does; it lags by at most one step of the test, far less
// than the SigningDelay a new CA waits in the bundle before it signs.
func (x *xdsThroughRotation) refreshBundle(t *testing.T) {
	t.Helper()
	tmp := x.bundleFile + ".tmp"
	if err := os.WriteFile(tmp, x.authority.Bundle(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, x.bundleFile); err != nil {
		t.Fatal(err)
	}
}

// startSidecar starts the operator-facing half of a sidecar as the
// sidecar command assembles it (sidecarapp.NewOperatorLink): TLS trusting
// the bundle file, re-read at each handshake.
func (x *xdsThroughRotation) startSidecar(ctx context.Context, t *testing.T) *xdsclient.Client {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("pod-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	link, err := sidecarapp.NewOperatorLink(sidecarapp.LinkOptions{
		XDS: xdsclient.Options{
			Address: x.addr, Namespace: rotationNS, Pod: rotationPod, PodUID: rotationUID, TokenFile: tokenFile,
			Apply: func(meshconfig.PodConfig) error { return nil }, Log: logr.Discard(),
			InitialBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond,
		},
		CAFile: x.bundleFile, ServerName: xdsServerName, Log: logr.Discard(),
	})
	if err != nil {
		t.Fatal(err)
	}
	link.Start(ctx)
	t.Cleanup(func() {
		closed := make(chan struct{})
		go func() { defer close(closed); link.Close() }()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("an xDS client did not stop within 10s")
		}
	})
	return link.XDS
}

func (x *xdsThroughRotation) waitApplied(t *testing.T, c *xdsclient.Client, version, what string) {
	t.Helper()
	envtestsuite.Eventually(t, eventuallyTimeout, poll, what, func() error {
		if got := c.Version(); got != version {
			return fmt.Errorf("version %q applied, want %q (stats %+v)", got, version, c.Stats())
		}
		return nil
	})
}

// step is one moment of the rotation: the bundle file refreshed, a change
// of configuration that must reach the long-lived stream, and a sidecar
// that starts now (a new TLS handshake against the current serving
// certificate) and must be configured.
func (x *xdsThroughRotation) step(ctx context.Context, t *testing.T) {
	t.Helper()
	x.refreshBundle(t)
	x.engaged = !x.engaged
	next := rotationConfig(x.engaged)
	x.pub.Set(next, rotationUID)
	x.waitApplied(t, x.longLived, next.Version, "a change on the long-lived stream")
	x.fresh++
	x.recordServed(t)
	fresh := x.startSidecar(ctx, t)
	x.waitApplied(t, fresh, next.Version, fmt.Sprintf("sidecar %d, started during the rotation", x.fresh))
}

// recordServed handshakes with the xDS server as a sidecar starting now
// does, trusting the bundle file, and records the certificate it serves.
func (x *xdsThroughRotation) recordServed(t *testing.T) {
	t.Helper()
	pool, err := tlsreload.NewReloadingPool(x.bundleFile, tlsreload.Options{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", x.addr, pool.ClientConfig(xdsServerName))
	if err != nil {
		t.Fatalf("a sidecar's handshake with the xDS server, trusting the bundle file: %v", err)
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	x.issuers[leaf.Issuer.CommonName], x.serials[leaf.SerialNumber.String()] = true, true
}

// sawRotation reports whether the sidecars that started met xDS serving
// certificates from two CAs.
func (x *xdsThroughRotation) sawRotation() bool { return len(x.issuers) >= 2 && len(x.serials) >= 2 }

// check ends the test's part: the long-lived stream never had to
// reconnect.
func (x *xdsThroughRotation) check(t *testing.T) {
	t.Helper()
	if s := x.longLived.Stats(); s.Connects != 1 {
		t.Errorf("the long-lived sidecar connected %d times during the rotation (last error %q), want once", s.Connects, s.LastError)
	}
	t.Logf("%d sidecars started and were configured during the rotation, through %d xDS serving certificates from %d CAs; the long-lived stream applied every change", x.fresh, len(x.serials), len(x.issuers))
}
