package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// whyCount is how many report writes of a class of objects gave one
// reason (the operator's own, normalized).
type whyCount struct {
	Class  string `json:"class"` // moving, steady or topic
	Why    string `json:"why"`
	Writes int    `json:"writes"`
}

var (
	podNames    = regexp.MustCompile(`\bp-\d+\b`)
	percentiles = regexp.MustCompile(`^p\d+(\.\d+)?$`)
	numbers     = regexp.MustCompile(`\b\d+(\.\d+)?(ns|µs|us|ms|s|m|h)*\b`)
	object      = regexp.MustCompile(`\b(subscription|topic)/([a-z0-9-]+)`)
)

// normalize elides a reason's numbers and pod names, keeping the names of
// percentiles (p99.9).
func normalize(why string) string {
	words := strings.Fields(podNames.ReplaceAllString(why, "<pod>"))
	for i, w := range words {
		if !percentiles.MatchString(w) {
			words[i] = numbers.ReplaceAllString(w, "#")
		}
	}
	return strings.Join(words, " ")
}

// writeReasons reads why the operator wrote each report status in
// [from, to), from its log (at -zap-log-level=debug it logs every write
// with the material change that caused it), and counts the reasons by
// class of object, the most frequent first.
func writeReasons(logPath string, from, to time.Time, w *world) ([]whyCount, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts := map[[2]string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !strings.Contains(string(line), `"report status written"`) {
			continue
		}
		var entry struct {
			TS     string          `json:"ts"`
			Why    string          `json:"why"`
			Object json.RawMessage `json:"object"`
		}
		if json.Unmarshal(line, &entry) != nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, entry.TS)
		if err != nil || at.Before(from) || !at.Before(to) {
			continue
		}
		m := object.FindStringSubmatch(string(entry.Object))
		if m == nil {
			continue
		}
		class := "topic"
		if m[1] == "subscription" {
			class = "steady"
			if w.isMoving(m[2]) {
				class = "moving"
			}
		}
		counts[[2]string{class, normalize(entry.Why)}]++
	}
	out := make([]whyCount, 0, len(counts))
	for k, n := range counts {
		out = append(out, whyCount{Class: k[0], Why: k[1], Writes: n})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Class != out[j].Class {
			return out[i].Class < out[j].Class
		}
		if out[i].Writes != out[j].Writes {
			return out[i].Writes > out[j].Writes
		}
		return out[i].Why < out[j].Why
	})
	return out, sc.Err()
}
