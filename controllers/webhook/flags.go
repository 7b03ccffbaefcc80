package webhook

import (
	"flag"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/weighstation/weighstation/meshconfig"
)

// DefaultResources are the sidecar's resources and bounds unless the
// operator's flags say otherwise. The memory limit leaves the default
// -memory-budget (64 MiB) its DefaultMemoryMargin and as much again.
func DefaultResources() Resources {
	q := resource.MustParse
	return Resources{
		CPURequest: q("50m"), CPULimit: q("500m"),
		MemoryRequest: q("96Mi"), MemoryLimit: q("128Mi"),
		CPUMin: q("10m"), CPUMax: q("2"),
		MemoryMin: q("32Mi"), MemoryMax: q("1Gi"),
		MemoryBudget: meshconfig.DefaultSidecarMemoryBudget,
		MemoryMargin: DefaultMemoryMargin,
	}
}

// RegisterFlags binds the operator's -sidecar-{cpu,memory}-* flags to r.
func (r *Resources) RegisterFlags(fs *flag.FlagSet) {
	for _, f := range []struct {
		name  string
		q     *resource.Quantity
		usage string
	}{
		{"sidecar-cpu-request", &r.CPURequest, "the injected sidecar's CPU request (a pod may override it: annotation " + CPURequestAnnotation + ")"},
		{"sidecar-cpu-limit", &r.CPULimit, "the injected sidecar's CPU limit (annotation " + CPULimitAnnotation + ")"},
		{"sidecar-memory-request", &r.MemoryRequest, "the injected sidecar's memory request (annotation " + MemoryRequestAnnotation + ")"},
		{"sidecar-memory-limit", &r.MemoryLimit, "the injected sidecar's memory limit (annotation " + MemoryLimitAnnotation + "); at least the sidecar's memory budget plus " + DefaultMemoryMargin.String()},
		{"sidecar-cpu-min", &r.CPUMin, "the least CPU request or limit a pod's annotations may ask for"},
		{"sidecar-cpu-max", &r.CPUMax, "the most CPU request or limit a pod's annotations may ask for"},
		{"sidecar-memory-min", &r.MemoryMin, "the least memory request or limit a pod's annotations may ask for"},
		{"sidecar-memory-max", &r.MemoryMax, "the most memory request or limit a pod's annotations may ask for"},
	} {
		fs.Var(quantityFlag{f.q}, f.name, f.usage)
	}
}

// quantityFlag is a flag.Value of a resource quantity (100m, 128Mi).
type quantityFlag struct{ q *resource.Quantity }

func (f quantityFlag) String() string {
	if f.q == nil {
		return ""
	}
	return f.q.String()
}

func (f quantityFlag) Set(s string) error {
	q, err := resource.ParseQuantity(s)
	if err != nil {
		return err
	}
	*f.q = q
	return nil
}
