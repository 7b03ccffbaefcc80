package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/weighstation/weighstation/demo/demoapi"
	"github.com/weighstation/weighstation/test/bench/harness"
)

// app is a running sample application and its control port.
type app struct {
	proc    *benchharness.LoggedProc
	control string // http://host:port
}

// buildApps builds the sample applications into dir.
func buildApps(dir string) (string, error) {
	bin := filepath.Join(dir, "demo-apps")
	out, err := exec.Command("go", "build", "-o", bin, "./demo/apps").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building the sample applications: %w\n%s", err, out)
	}
	return bin, nil
}

// startApp runs one role of the sample applications on natsURL and waits
// until it is connected and subscribed.
func startApp(bin, role, natsURL, logPath string, timeout time.Duration) (*app, error) {
	addr, err := benchharness.FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := benchharness.StartLogged(role, logPath, bin, role, "-nats", natsURL, "-control", addr)
	if err != nil {
		return nil, err
	}
	benchharness.AtExit(p.Stop)
	a := &app{proc: p, control: "http://" + addr}
	if err := benchharness.WaitHTTPReady(a.control+demoapi.PathReady, timeout, p.Alive); err != nil {
		return nil, fmt.Errorf("%s: %w", role, err)
	}
	return a, nil
}

// httpClient bounds every call to an application.
var httpClient = &http.Client{Timeout: 30 * time.Second}

// get decodes the JSON at path into v.
func (a *app) get(path string, v any) error {
	resp, err := httpClient.Get(a.control + path)
	if err != nil {
		return fmt.Errorf("%s: %w", a.proc.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("%s %s: %s: %s", a.proc.Name, path, resp.Status, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %w", a.proc.Name, path, err)
	}
	return nil
}

// post calls path with query, decoding a JSON answer into v unless v is
// nil.
func (a *app) post(path string, query url.Values, v any) error {
	resp, err := httpClient.Post(a.control+path+"?"+query.Encode(), "", nil)
	if err != nil {
		return fmt.Errorf("%s: %w", a.proc.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", a.proc.Name, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s: %s", a.proc.Name, path, resp.Status, b)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s %s: %w", a.proc.Name, path, err)
	}
	return nil
}

func (a *app) stats() (demoapi.Stats, error) {
	var s demoapi.Stats
	return s, a.get(demoapi.PathStats, &s)
}

// logLines are the lines of the application's log that contain any of
// words.
func (a *app) logLines(words ...string) []string {
	b, _ := os.ReadFile(a.proc.LogPath)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}
