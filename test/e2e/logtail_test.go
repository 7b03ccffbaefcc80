package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTailLines(t *testing.T) {
	dir := t.TempDir()
	var b strings.Builder
	for i := 1; i <= 50000; i++ { // longer than one chunk
		fmt.Fprintf(&b, "kubelet line %d\n", i)
	}
	path := filepath.Join(dir, "kubelet.log")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := TailLines(path, 3)
	if err != nil || got != "kubelet line 49998\nkubelet line 49999\nkubelet line 50000" {
		t.Fatalf("TailLines = %q, %v", got, err)
	}
	short := filepath.Join(dir, "short.log")
	if err := os.WriteFile(short, []byte("one\ntwo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, _ := TailLines(short, 40); got != "one\ntwo" {
		t.Fatalf("a short log: %q", got)
	}
	if _, err := TailLines(filepath.Join(dir, "missing.log"), 3); err == nil {
		t.Fatal("a missing log was read")
	}
}
