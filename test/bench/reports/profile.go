package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"time"
)

// fetchProfile saves the operator's pprof profile at url (its
// -pprof-bind-address) into path.
func fetchProfile(url, path string, timeout time.Duration) error {
	client := &http.Client{Timeout: timeout}
	resp, err := client.Get(url)
	if err != nil {
		return fmt.Errorf("fetching %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetching %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// topOf writes pprof's top functions of the profile at path beside it
// (path + ".top.txt", by flat and by cumulative cost), read against the
// operator's binary.
func topOf(path, bin string, topArgs ...string) error {
	var out []byte
	for _, order := range [][]string{{"-top"}, {"-top", "-cum"}} {
		args := append(append([]string{"tool", "pprof", "-nodecount=40"}, order...), topArgs...)
		b, err := exec.Command("go", append(args, bin, path)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("go tool pprof %v: %w\n%s", order, err, b)
		}
		out = append(append(out, b...), '\n')
	}
	return os.WriteFile(path+".top.txt", out, 0o644)
}
