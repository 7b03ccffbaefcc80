package configfile_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weighstation/weighstation/meshconfig"
	"github.com/weighstation/weighstation/sidecar/configfile"
)

const good = `
namespace: shop
pod: billing-0
version: v1
default: {subject: ">", maxMessageBytes: 1048576, mayPublish: true, stampHeader: true}
topics:
- {name: orders, subject: "orders.>", maxMessageBytes: 4096, mayPublish: true, stampHeader: true}
`

func TestWatchAppliesChangesAndKeepsTheLastGoodOne(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	// Each version replaces the file whole (renamed into place, as a
	// ConfigMap volume's swap does): os.WriteFile truncates first, and a
	// poll between the truncation and the write reads an empty file,
	// which is reported as one more error than the test counts.
	write := func(s string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(good)
	var (
		mu      sync.Mutex
		applied []string
		errs    []string
	)
	apply := func(cfg meshconfig.PodConfig) error {
		mu.Lock()
		defer mu.Unlock()
		if cfg.Version == "refuse-me" {
			return errAny("refused by the sidecar")
		}
		applied = append(applied, cfg.Version)
		return nil
	}
	onError := func(err error) { mu.Lock(); errs = append(errs, err.Error()); mu.Unlock() }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := configfile.Watch(ctx, path, 10*time.Millisecond, apply, onError); err != nil {
		t.Fatal(err)
	}
	state := func() ([]string, []string) {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), applied...), append([]string(nil), errs...)
	}
	waitFor := func(what string, cond func(a, e []string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if a, e := state(); cond(a, e) {
				return
			}
			if time.Now().After(deadline) {
				a, e := state()
				t.Fatalf("%s: applied %v, errors %v", what, a, e)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	write(strings.Replace(good, "version: v1", "version: v2", 1))
	waitFor("the change is applied", func(a, _ []string) bool { return len(a) == 2 && a[1] == "v2" })

	write("topics: [this is not a configuration")
	waitFor("a malformed file is reported", func(_, e []string) bool { return len(e) == 1 && strings.Contains(e[0], "decoding") })

	write(strings.Replace(good, "version: v1", "maxMesageBytes: 3\nversion: v3", 1))
	waitFor("an unknown field is refused", func(_, e []string) bool { return len(e) == 2 && strings.Contains(e[1], "maxMesageBytes") })

	write(strings.Replace(good, "version: v1", "version: refuse-me", 1))
	waitFor("the sidecar's refusal is reported", func(_, e []string) bool { return len(e) == 3 && strings.Contains(e[2], "refused by the sidecar") })
	if a, _ := state(); len(a) != 2 {
		t.Fatalf("applied %v: a refused or malformed configuration replaced the last good one", a)
	}
}

func TestLoadRefusesAnOversizeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "huge.yaml")
	if err := os.WriteFile(path, make([]byte, configfile.MaxFileBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := configfile.Load(path); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Load = %v", err)
	}
}

type errAny string

func (e errAny) Error() string { return string(e) }

func TestAMissingFileIsReportedOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var errs []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := configfile.Watch(ctx, path, 5*time.Millisecond, func(meshconfig.PodConfig) error { return nil },
		func(err error) { mu.Lock(); errs = append(errs, err.Error()); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // 40 checks
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !strings.Contains(errs[0], "no such file") {
		t.Fatalf("errors %q, want the missing file reported once", errs)
	}
}
