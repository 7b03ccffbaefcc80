package reports

import (
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reasons a report or stream is refused: the label of the refused metric.
const (
	refusedNotServing   = "not_serving"
	refusedNoIdentity   = "no_identity"
	refusedPodUID       = "pod_uid"
	refusedSchema       = "schema_version"
	refusedMalformed    = "malformed"
	refusedUnknownPod   = "unknown_pod"
	refusedPolicy       = "policy"
	refusedHistogram    = "histogram"
	refusedSeriesCap    = "series_cap"
	refusedPodSeriesCap = "pod_series_cap"
	refusedMemoryCap    = "memory_cap"
	refusedPodRate      = "pod_rate"
)

// refusal is why a report was refused: a gRPC status (the stream ends with
// it) and the reason it is counted under.
type refusal struct {
	code   codes.Code
	reason string
	err    error
}

func refuse(code codes.Code, reason string, format string, args ...any) *refusal {
	return &refusal{code: code, reason: reason, err: fmt.Errorf(format, args...)}
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// GRPCStatus makes status.FromError, and so gRPC, see the code.
func (r *refusal) GRPCStatus() *status.Status { return status.New(r.code, r.err.Error()) }

// errorf is fmt.Errorf, for the checks' plain errors.
var errorf = fmt.Errorf
