package e2e

import (
	"fmt"
	"strings"
	"time"
)

// DefaultLeaseDuration is the operator's -leader-elect-lease-duration
// default (cmd/weighstation/operatorapp), which the chart sets from
// operator.leaderElection.leaseDuration (values.yaml: 15s).
const DefaultLeaseDuration = 15 * time.Second

// LeaseDuration reads -leader-elect-lease-duration from the operator
// container's arguments (both -flag=value and -flag value), or the
// operator's default when it is not given.
func LeaseDuration(args []string) (time.Duration, error) {
	const flag = "leader-elect-lease-duration"
	for i, a := range args {
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != flag || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return 0, fmt.Errorf("-%s has no value", flag)
			}
			value = args[i+1]
		}
		d, err := time.ParseDuration(value)
		if err != nil {
			return 0, fmt.Errorf("-%s: %w", flag, err)
		}
		return d, nil
	}
	return DefaultLeaseDuration, nil
}

// HolderPod is the pod name in a leader election holder identity:
// controller-runtime's is "<hostname>_<uuid>", and a pod's hostname is its
// name.
func HolderPod(identity string) string {
	pod, _, _ := strings.Cut(identity, "_")
	return pod
}

// ContainerID strips the runtime's scheme from a containerStatuses[]
// containerID ("containerd://<id>").
func ContainerID(statusID string) string {
	if _, id, ok := strings.Cut(statusID, "://"); ok {
		return id
	}
	return statusID
}

// KillCommand puts id into the E2E_KILL_CONTAINER_CMD template.
func KillCommand(template, id string) (string, error) {
	if !strings.Contains(template, KillIDPlaceholder) {
		return "", fmt.Errorf("the kill command %q has no %s", template, KillIDPlaceholder)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return "", fmt.Errorf("container ID %q has a character a shell would read", id)
		}
	}
	return strings.ReplaceAll(template, KillIDPlaceholder, id), nil
}
