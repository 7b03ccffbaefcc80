package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// toolTimeout bounds every kubectl and helm command.
const toolTimeout = 2 * time.Minute

// tools runs the real kubectl and helm against the demo's apiserver.
type tools struct {
	kubectl, helm string
	kubeconfig    string
	// helmHome keeps helm away from the user's repositories, plugins and
	// cache.
	helmHome string
}

// kubectlOut runs kubectl with args and returns its output.
func (t *tools) kubectlOut(args ...string) (string, error) {
	return runTool(t.kubectl, nil, append([]string{"--kubeconfig", t.kubeconfig}, args...)...)
}

// kubectlShow runs kubectl and prints the command and its output.
func (t *tools) kubectlShow(p *progress, args ...string) (string, error) {
	out, err := t.kubectlOut(args...)
	if err != nil {
		return out, err
	}
	p.block("$ kubectl "+quoteArgs(args), out)
	return out, nil
}

// helmOut runs helm with args and returns its output.
func (t *tools) helmOut(args ...string) (string, error) {
	env := []string{"HELM_CONFIG_HOME=" + t.helmHome, "HELM_CACHE_HOME=" + t.helmHome, "HELM_DATA_HOME=" + t.helmHome}
	return runTool(t.helm, env, append(args, "--kubeconfig", t.kubeconfig)...)
}

func runTool(bin string, env []string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s", bin, quoteArgs(args), err, stderr.String())
	}
	return stdout.String(), nil
}

// quoteArgs prints arguments as a shell would need them.
func quoteArgs(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " {}\"'*$") {
			a = "'" + a + "'"
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}
