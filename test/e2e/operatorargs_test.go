package e2e

import (
	"testing"
	"time"
)

func TestLeaseDuration(t *testing.T) {
	for _, c := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"operator", "-namespace=x", "-leader-elect-lease-duration=20s"}, 20 * time.Second},
		{[]string{"operator", "--leader-elect-lease-duration", "7s"}, 7 * time.Second},
		{[]string{"operator", "-leader-elect-renew-deadline=10s"}, DefaultLeaseDuration},
	} {
		got, err := LeaseDuration(c.args)
		if err != nil || got != c.want {
			t.Errorf("LeaseDuration(%q) = %s, %v; want %s", c.args, got, err, c.want)
		}
	}
	for _, bad := range [][]string{{"-leader-elect-lease-duration=soon"}, {"-leader-elect-lease-duration"}} {
		if _, err := LeaseDuration(bad); err == nil {
			t.Errorf("LeaseDuration(%q) accepted it", bad)
		}
	}
}

func TestHolderPodContainerIDAndKillCommand(t *testing.T) {
	if got := HolderPod("weighstation-operator-7d9f-abcde_0f1e2d3c-aaaa-bbbb"); got != "weighstation-operator-7d9f-abcde" {
		t.Errorf("HolderPod = %q", got)
	}
	if got := ContainerID("containerd://4f1c2b"); got != "4f1c2b" {
		t.Errorf("ContainerID = %q", got)
	}
	cmd, err := KillCommand("ctr -n k8s.io tasks kill -s SIGKILL {id}", "4f1c2b")
	if err != nil || cmd != "ctr -n k8s.io tasks kill -s SIGKILL 4f1c2b" {
		t.Errorf("KillCommand = %q, %v", cmd, err)
	}
	if _, err := KillCommand("kill {id}", "4f; rm -rf /"); err == nil {
		t.Error("a container ID with shell syntax was accepted")
	}
}
