package benchharness

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// BuildUnlessGiven builds the package pkg into dir, named as pkg's last
// element, and sets *bin to it, unless *bin names a binary already. The
// compiler's output goes to stderr.
func BuildUnlessGiven(bin *string, dir, pkg string) error {
	if *bin != "" {
		return nil
	}
	name := filepath.Base(pkg)
	*bin = filepath.Join(dir, name)
	build := exec.Command("go", "build", "-o", *bin, pkg)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the %s: %w", name, err)
	}
	return nil
}
