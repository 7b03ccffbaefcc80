package benchharness

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scrape reads a Prometheus text endpoint into "name{labels}" -> value.
func Scrape(url string) (map[string]float64, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

// WaitHTTPReady polls url until it answers 200, alive reports the
// process behind it gone, or timeout passes.
func WaitHTTPReady(url string, timeout time.Duration, alive func() error) error {
	return WaitHTTPBody(url, "", timeout, alive)
}

// WaitHTTPBody polls url until it answers 200 with a body that contains
// want, alive reports the process behind it gone, or timeout passes.
func WaitHTTPBody(url, want string, timeout time.Duration, alive func() error) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, readErr := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case readErr != nil:
				err = readErr
			case resp.StatusCode != http.StatusOK:
				err = fmt.Errorf("status %s", resp.Status)
			case !strings.Contains(string(body), want):
				err = fmt.Errorf("no %q in %q", want, body)
			default:
				return nil
			}
		}
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s was not ready within %s: %v", url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
