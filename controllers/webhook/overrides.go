package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Annotations by which a pod overrides the sidecar's resources, each
// within the operator's bounds (Resources).
const (
	CPURequestAnnotation    = "weighstation.io/sidecar-cpu-request"
	CPULimitAnnotation      = "weighstation.io/sidecar-cpu-limit"
	MemoryRequestAnnotation = "weighstation.io/sidecar-memory-request"
	MemoryLimitAnnotation   = "weighstation.io/sidecar-memory-limit"
)

// DefaultMemoryMargin is what the sidecar's memory limit must leave above
// its memory budget (the bytes its pending messages and large read
// buffers may hold): room for the Go runtime, the binary, connection
// buffers and the xDS client, and for 256 connections that each announce
// a 1 MiB body, which peak 46 MiB above the budget (docs/sidecar.md
// Memory; docs/benchmarks.md). A limit closer to the budget lets the
// kernel kill the sidecar before the budget sheds anything.
var DefaultMemoryMargin = resource.MustParse("48Mi")

// Resources are the sidecar's resources: the defaults every pod gets, and
// the bounds within which a pod's annotations may change them.
type Resources struct {
	CPURequest, CPULimit       resource.Quantity
	MemoryRequest, MemoryLimit resource.Quantity
	// CPUMin..CPUMax bound both CPU values, MemoryMin..MemoryMax both
	// memory values.
	CPUMin, CPUMax       resource.Quantity
	MemoryMin, MemoryMax resource.Quantity
	// MemoryBudget is the sidecar's -memory-budget in bytes, and
	// MemoryMargin what the memory limit must add to it at least.
	MemoryBudget int64
	MemoryMargin resource.Quantity
}

// names say where each value came from, in the user's vocabulary: an
// annotation, or an operator flag.
type names struct{ cpuRequest, cpuLimit, memoryRequest, memoryLimit string }

var (
	annotationNames = names{CPURequestAnnotation, CPULimitAnnotation, MemoryRequestAnnotation, MemoryLimitAnnotation}
	// FlagNames are the operator's flags for the defaults (cmd/weighstation/operatorapp).
	flagNames = names{"-sidecar-cpu-request", "-sidecar-cpu-limit", "-sidecar-memory-request", "-sidecar-memory-limit"}
)

// Validate checks the defaults themselves against the bounds, naming the
// operator's flags, so that a bad flag stops the operator rather than
// every pod.
func (r Resources) Validate() error {
	if r.CPUMin.Cmp(r.CPUMax) > 0 {
		return fmt.Errorf("-sidecar-cpu-min (%s) must not exceed -sidecar-cpu-max (%s)", r.CPUMin.String(), r.CPUMax.String())
	}
	if r.MemoryMin.Cmp(r.MemoryMax) > 0 {
		return fmt.Errorf("-sidecar-memory-min (%s) must not exceed -sidecar-memory-max (%s)", r.MemoryMin.String(), r.MemoryMax.String())
	}
	return r.check(r.CPURequest, r.CPULimit, r.MemoryRequest, r.MemoryLimit, flagNames)
}

// For returns the sidecar's resources for a pod with these annotations:
// the defaults, each replaced by its annotation where there is one. An
// annotation that does not parse, or a result out of bounds, is an error
// that names the annotation and the bound.
func (r Resources) For(annotations map[string]string) (corev1.ResourceRequirements, error) {
	values := []*resource.Quantity{&r.CPURequest, &r.CPULimit, &r.MemoryRequest, &r.MemoryLimit}
	for i, name := range []string{CPURequestAnnotation, CPULimitAnnotation, MemoryRequestAnnotation, MemoryLimitAnnotation} {
		s, ok := annotations[name]
		if !ok {
			continue
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return corev1.ResourceRequirements{}, fmt.Errorf("annotation %s: %q is not a quantity (e.g. 100m, 128Mi): %w", name, s, err)
		}
		*values[i] = q
	}
	// Only names that came from an annotation are the pod's to fix; a
	// default that clashes with the pod's other value still names the
	// annotation, which is what the pod can change.
	if err := r.check(r.CPURequest, r.CPULimit, r.MemoryRequest, r.MemoryLimit, annotationNames); err != nil {
		return corev1.ResourceRequirements{}, err
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: r.CPURequest, corev1.ResourceMemory: r.MemoryRequest},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: r.CPULimit, corev1.ResourceMemory: r.MemoryLimit},
	}, nil
}

// check tests the four values against the bounds, naming them by n.
func (r Resources) check(cpuReq, cpuLim, memReq, memLim resource.Quantity, n names) error {
	for _, v := range []struct {
		name     string
		q        resource.Quantity
		min, max resource.Quantity
		minFlag  string
		maxFlag  string
	}{
		{n.cpuRequest, cpuReq, r.CPUMin, r.CPUMax, "-sidecar-cpu-min", "-sidecar-cpu-max"},
		{n.cpuLimit, cpuLim, r.CPUMin, r.CPUMax, "-sidecar-cpu-min", "-sidecar-cpu-max"},
		{n.memoryRequest, memReq, r.MemoryMin, r.MemoryMax, "-sidecar-memory-min", "-sidecar-memory-max"},
		{n.memoryLimit, memLim, r.MemoryMin, r.MemoryMax, "-sidecar-memory-min", "-sidecar-memory-max"},
	} {
		if v.q.Cmp(v.min) < 0 {
			return fmt.Errorf("%s: %s is below the operator's minimum %s (%s)", v.name, v.q.String(), v.min.String(), v.minFlag)
		}
		if v.q.Cmp(v.max) > 0 {
			return fmt.Errorf("%s: %s is above the operator's maximum %s (%s)", v.name, v.q.String(), v.max.String(), v.maxFlag)
		}
	}
	floor := *resource.NewQuantity(r.MemoryBudget, resource.BinarySI)
	floor.Add(r.MemoryMargin)
	if memLim.Cmp(floor) < 0 {
		return fmt.Errorf("%s: %s is below %s, the sidecar's memory budget (%s) plus a margin of %s for the runtime; under it the kernel would kill the sidecar before the budget sheds load",
			n.memoryLimit, memLim.String(), floor.String(), resource.NewQuantity(r.MemoryBudget, resource.BinarySI).String(), r.MemoryMargin.String())
	}
	if cpuReq.Cmp(cpuLim) > 0 {
		return fmt.Errorf("%s (%s) must not exceed %s (%s)", n.cpuRequest, cpuReq.String(), n.cpuLimit, cpuLim.String())
	}
	if memReq.Cmp(memLim) > 0 {
		return fmt.Errorf("%s (%s) must not exceed %s (%s)", n.memoryRequest, memReq.String(), n.memoryLimit, memLim.String())
	}
	return nil
}
