package webhook

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Server serves the Injector at Path over TLS. It is a manager.Runnable
// that runs on every replica: the webhook Service selects them all, since
// injecting needs no leader.
type Server struct {
	// Listen is the address (the operator's -webhook-listen).
	Listen string
	// GetCertificate returns the serving certificate: the operator CA's,
	// or the files of the operator's -webhook-cert-dir (cert-manager's);
	// either is renewed without a restart.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	Injector       *Injector
	Log            logr.Logger
}

// shutdownTimeout bounds how long a stopping server waits for the
// admission requests it is answering.
const shutdownTimeout = 5 * time.Second

// Start listens on Listen and serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("-webhook-listen %s: %w", s.Listen, err)
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, and closes ln.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hook, err := admission.StandaloneWebhook(&admission.Webhook{Handler: s.Injector}, admission.StandaloneOptions{Logger: s.Log, MetricsPath: Path})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(Path, hook)
	srv := &http.Server{
		Handler: mux,
		// TLS 1.2 at least: the apiserver speaks 1.3, and older clients
		// than 1.2 have no business here.
		TLSConfig:         &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	s.Log.Info("serving the sidecar-injection webhook", "address", ln.Addr().String(), "path", Path)
	err = srv.ServeTLS(ln, "", "")
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return fmt.Errorf("serving the sidecar-injection webhook: %w", err)
}

// NeedLeaderElection is false: every replica answers the apiserver.
func (s *Server) NeedLeaderElection() bool { return false }
