// Package broker runs weighstation's embedded NATS broker: nats-server/v2
// inside our binary, with every limit explicit and authentication that only
// sidecars can pass, so applications can reach the mesh only through their
// sidecar and its policy. Sidecars authenticate with the per-pod credential
// the operator issued them (Trust), or, run by hand, with a shared token or
// their nkeys.
package broker

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Options configure the broker.
type Options struct {
	// Listen is the client address, host:port.
	Listen string
	// Token is required of every client, unless SidecarNkeys is set. With
	// neither the broker refuses to start: an unauthenticated broker would
	// let applications bypass their sidecars.
	Token string
	// SidecarNkeys are the public nkeys (U...) of the sidecars allowed in;
	// each sidecar proves its key by signing the broker's nonce.
	SidecarNkeys []string
	// Trust admits the sidecars that hold a credential the operator issued
	// (ReadTrust); instead of Token and SidecarNkeys.
	Trust *Trust
	// AccountDir is where a broker with Trust keeps the namespaces'
	// account JWTs it learned (nats-server's full resolver).
	AccountDir string
	// MaxPayload is the largest message, in bytes.
	MaxPayload int32
	// MaxPending is the most bytes buffered for one client (a sidecar)
	// before the broker treats it as a slow consumer.
	MaxPending int64
	// MaxConnections bounds the client connections (sidecars).
	MaxConnections int
	// ClusterName, ClusterListen and Routes join brokers into a cluster;
	// ClusterListen empty means no clustering.
	ClusterName   string
	ClusterListen string
	Routes        []string
	// RouteTLS, when not nil, is mutual TLS on the routes: every broker of
	// the cluster must have it, with certificates from the same CA.
	RouteTLS *RouteTLS
}

// DefaultOptions: nats-server's own defaults for payload (1 MiB) and
// pending (64 MiB), and 10,000 connections (one per sidecar pod).
var DefaultOptions = Options{
	Listen:         "0.0.0.0:4222",
	MaxPayload:     1 << 20,
	MaxPending:     64 << 20,
	MaxConnections: 10_000,
	ClusterName:    "weighstation",
}

// New configures a broker; Start it with (*server.Server).Start.
func New(o Options) (*server.Server, error) {
	given := 0
	for _, set := range []bool{o.Token != "", len(o.SidecarNkeys) > 0, o.Trust != nil} {
		if set {
			given++
		}
	}
	switch given {
	case 0:
		return nil, errors.New("broker: the operator's trust, a token or sidecar nkeys are required, so that only sidecars can connect")
	case 1:
	default:
		return nil, errors.New("broker: give one of the operator's trust, a token or sidecar nkeys")
	}
	if o.MaxPayload < 1 || o.MaxPending < int64(o.MaxPayload) || o.MaxConnections < 1 {
		return nil, fmt.Errorf("broker: limits must be positive and max_pending at least max_payload, got %+v", o)
	}
	host, port, err := splitHostPort(o.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: listen address: %w", err)
	}
	var users []*server.NkeyUser
	for _, k := range o.SidecarNkeys {
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("broker: %q is not a public user nkey", k)
		}
		users = append(users, &server.NkeyUser{Nkey: k})
	}
	opts := &server.Options{
		Host:          host,
		Port:          port,
		Authorization: o.Token,
		Nkeys:         users,
		MaxPayload:    o.MaxPayload,
		MaxPending:    o.MaxPending,
		MaxConn:       o.MaxConnections,
		NoSigs:        true,
		WriteDeadline: 10 * time.Second,
	}
	if o.Trust != nil {
		if err := o.Trust.apply(opts, o.AccountDir); err != nil {
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	if o.RouteTLS != nil && o.ClusterListen == "" {
		// Without routes the files would go unused, and a mistake in the
		// flags unnoticed.
		return nil, errors.New("broker: route TLS is set but there is no cluster address")
	}
	if o.ClusterListen != "" {
		chost, cport, err := splitHostPort(o.ClusterListen)
		if err != nil {
			return nil, fmt.Errorf("broker: cluster address: %w", err)
		}
		opts.Cluster = server.ClusterOpts{Name: o.ClusterName, Host: chost, Port: cport}
		if o.RouteTLS != nil {
			cfg, err := o.RouteTLS.tlsConfig()
			if err != nil {
				return nil, fmt.Errorf("broker: %w", err)
			}
			opts.Cluster.TLSConfig = cfg
			opts.Cluster.TLSTimeout = o.RouteTLS.Timeout.Seconds() // 0: nats-server's default
		}
		for _, r := range o.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("broker: route %q: %w", r, err)
			}
			opts.Routes = append(opts.Routes, u)
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	return s, nil
}

func splitHostPort(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	return host, port, nil
}
