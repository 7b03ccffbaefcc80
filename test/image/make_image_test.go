package image_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeImage: `make image` builds with docker, else podman, passing
// VERSION as the build argument the Dockerfile stamps, and without either
// fails naming both. Fake tools stand in for the engines (none here).
func TestMakeImage(t *testing.T) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		t.Fatal(err)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tools []string // fake engines on PATH
		args  []string
		// want: the tool that ran and its arguments; empty: make fails.
		want       string
		wantOutput []string
	}{
		{"neither", nil, nil, "", []string{"neither docker nor podman", "CONTAINER_TOOL"}},
		{"docker", []string{"docker", "podman"}, []string{"VERSION=v1.2.3"},
			"docker build --build-arg VERSION=v1.2.3 --build-arg REVISION= -t ghcr.io/weighstation/weighstation:v1.2.3 .", nil},
		{"podman", []string{"podman"}, []string{"VERSION=v1.2.3", "IMAGE=registry.example/ws:dev"},
			"podman build --build-arg VERSION=v1.2.3 --build-arg REVISION= -t registry.example/ws:dev .", nil},
		{"named", []string{"docker"}, []string{"VERSION=v1", "CONTAINER_TOOL=nerdctl"}, "", []string{"nerdctl build"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// PATH holds bash (the Makefile's shell) and the fake tools
			// alone: no git (REVISION is empty), no real engine.
			dir, record := t.TempDir(), filepath.Join(t.TempDir(), "ran")
			if err := os.Symlink(bash, filepath.Join(dir, "bash")); err != nil {
				t.Fatal(err)
			}
			for _, tool := range tc.tools {
				script := "#!/bin/sh\necho " + tool + ` "$@" > ` + record + "\n"
				if err := os.WriteFile(filepath.Join(dir, tool), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command(makePath, append([]string{"--no-print-directory", "image"}, tc.args...)...)
			cmd.Dir = root
			cmd.Env = append(withoutVars(os.Environ(), "PATH", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CONTAINER_TOOL", "IMAGE", "VERSION"), "PATH="+dir)
			out, err := cmd.CombinedOutput()
			ran, _ := os.ReadFile(record)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("make image succeeded without a container tool:\n%s", out)
				}
			} else if err != nil || strings.TrimSpace(string(ran)) != tc.want {
				t.Fatalf("make image: %v; ran %q, want %q\n%s", err, ran, tc.want, out)
			}
			for _, want := range tc.wantOutput {
				if !strings.Contains(string(out), want) {
					t.Errorf("make image's output does not say %q:\n%s", want, out)
				}
			}
		})
	}
}
