package sidecarapp

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
)

// GoMemoryMargin is what the sidecar's Go soft memory limit (-go-memory-limit
// auto) adds to -memory-budget: room for the fixed overhead (the runtime,
// 256 connections' stacks and first read buffers, the broker connection's
// buffers, the kept frame buffers) and for garbage not yet collected. With
// it, 256 connections each sending 1 MiB bodies stay under the chart's
// 128Mi limit (cmd/weighstation-sidecar's
// TestHostileLargeBodiesStayUnderTheContainerLimit). Without a soft limit
// the garbage collector lets the heap grow to twice what is live
// (GOGC=100), and the same flood can pass that limit.
const GoMemoryMargin = 32 << 20

// goMemoryLimit is the Go soft memory limit that -go-memory-limit asks for:
// "auto", -memory-budget plus GoMemoryMargin unless GOMEMLIMIT is set in
// the environment (Go applies that one itself); "off", none (Go's default,
// or GOMEMLIMIT); or a number of bytes. set is false when the process's
// own limit stays.
func goMemoryLimit(flag string, budget int64, environ func(string) string) (limit int64, set bool, err error) {
	switch flag {
	case "auto":
		if environ("GOMEMLIMIT") != "" {
			return 0, false, nil
		}
		return budget + GoMemoryMargin, true, nil
	case "off":
		return 0, false, nil
	}
	n, err := strconv.ParseInt(flag, 10, 64)
	if err != nil || n < 1 {
		return 0, false, fmt.Errorf("-go-memory-limit must be auto, off or a number of bytes, got %q", flag)
	}
	return n, true, nil
}

// applyGoMemoryLimit sets the limit goMemoryLimit chose, and returns the
// limit in force, for the log (0: none).
func applyGoMemoryLimit(flag string, budget int64) (int64, error) {
	limit, set, err := goMemoryLimit(flag, budget, os.Getenv)
	if err != nil {
		return 0, err
	}
	if set {
		debug.SetMemoryLimit(limit)
	}
	return goMemoryLimitInForce(), nil
}

// goMemoryLimitInForce is the process's Go soft memory limit, for the log
// (0: none).
func goMemoryLimitInForce() int64 {
	if current := debug.SetMemoryLimit(-1); current != math.MaxInt64 {
		return current
	}
	return 0
}
