package benchharness

import (
	"errors"
	"time"
)

// OperatorOptions start `weighstation operator` for a bench.
type OperatorOptions struct {
	// Bin is the weighstation binary; Kubeconfig an admin kubeconfig (the
	// benches measure what the operator does, not RBAC); Namespace the
	// operator's own (its CA Secret).
	Bin, Kubeconfig, Namespace string
	// LogPath is the file its output goes to.
	LogPath string
	// Args are extra flags, after the bench's; Env extra environment
	// ("GOMEMLIMIT=400MiB").
	Args, Env []string
}

// Operator is a running operator and its addresses.
type Operator struct {
	*LoggedProc
	// XDSAddr is its xDS server, host:port; MetricsURL its Prometheus
	// endpoint.
	XDSAddr, MetricsURL string
}

// StartOperator starts the operator on free local ports, without leader
// election, registers its stop with AtExit, and waits (up to 60 s) for its
// /readyz. The caller stops it with Stop.
func StartOperator(o OperatorOptions) (*Operator, error) {
	xdsAddr, err1 := FreeAddr()
	probeAddr, err2 := FreeAddr()
	metricsAddr, err3 := FreeAddr()
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	args := append([]string{"operator", "-kubeconfig", o.Kubeconfig, "-namespace", o.Namespace, "-xds-listen", xdsAddr,
		"-metrics-bind-address", metricsAddr, "-health-probe-bind-address", probeAddr, "-leader-elect=false",
		"-zap-time-encoding=rfc3339nano"}, o.Args...)
	p, err := StartLoggedEnv("operator", o.LogPath, o.Env, o.Bin, args...)
	if err != nil {
		return nil, err
	}
	AtExit(p.Stop)
	if err := WaitHTTPReady("http://"+probeAddr+"/readyz", 60*time.Second, p.Alive); err != nil {
		p.Stop()
		return nil, err
	}
	return &Operator{LoggedProc: p, XDSAddr: xdsAddr, MetricsURL: "http://" + metricsAddr + "/metrics"}, nil
}
