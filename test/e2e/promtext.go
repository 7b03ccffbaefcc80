package e2e

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// Sample is one line of Prometheus's text format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Samples is a scrape.
type Samples []Sample

// ParseMetrics reads Prometheus's text exposition format (what the
// sidecar's, the broker's and the operator's /metrics serve): comments
// are skipped, each other line is a name, optional labels and a value.
func ParseMetrics(text string) (Samples, error) {
	var out Samples
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d %q: %w", n, line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading metrics: %w", err)
	}
	return out, nil
}

func parseSample(line string) (Sample, error) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name = line[:i]
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		var err error
		if rest, err = parseLabels(rest[1:], s.Labels); err != nil {
			return s, err
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return s, fmt.Errorf("no value")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, fmt.Errorf("value %q: %w", fields[0], err)
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `k="v",...}` into labels and returns what follows.
func parseLabels(in string, labels map[string]string) (string, error) {
	for {
		in = strings.TrimLeft(in, " ,")
		if strings.HasPrefix(in, "}") {
			return in[1:], nil
		}
		eq := strings.Index(in, "=")
		if eq < 0 || len(in) < eq+2 || in[eq+1] != '"' {
			return "", fmt.Errorf("malformed labels")
		}
		key := strings.TrimSpace(in[:eq])
		in = in[eq+2:]
		var v strings.Builder
		closed := false
		for i := 0; i < len(in); i++ {
			c := in[i]
			if c == '\\' && i+1 < len(in) {
				i++
				switch in[i] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(in[i])
				}
				continue
			}
			if c == '"' {
				in, closed = in[i+1:], true
				break
			}
			v.WriteByte(c)
		}
		if !closed {
			return "", fmt.Errorf("unterminated label value of %s", key)
		}
		labels[key] = v.String()
	}
}

// Sum adds the values of the samples named name whose labels include
// match; found is false when there is none.
func (s Samples) Sum(name string, match map[string]string) (sum float64, found bool) {
	for _, x := range s {
		if x.Name != name || !includes(x.Labels, match) {
			continue
		}
		sum += x.Value
		found = true
	}
	return sum, found
}

// ByLabel sums the samples named name by the value of label.
func (s Samples) ByLabel(name, label string) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s {
		if x.Name == name {
			out[x.Labels[label]] += x.Value
		}
	}
	return out
}

func includes(labels, match map[string]string) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}
