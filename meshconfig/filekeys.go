package meshconfig

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// The file's vocabulary is the JSON form of PodConfig: its keys and types
// are read from the types themselves, so that the check cannot fall behind
// a new field.

var podConfigType = reflect.TypeFor[PodConfig]()

// checkValue reports, with their paths, the keys that t does not have and
// the values of the wrong type in v. Null values were removed first.
func checkValue(p *problems, path string, t reflect.Type, v any) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			p.addf("%s: want a mapping with the keys %s, got %s", orRoot(path), keysOf(t), describe(v))
			return
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			f, ok := fieldByKey(t, k)
			if !ok {
				p.addf("%s", unknownKey(join(path, k), t, k))
				continue
			}
			checkValue(p, join(path, k), f.Type, m[k])
		}
	case reflect.Slice:
		l, ok := v.([]any)
		if !ok {
			p.addf("%s: want a list, got %s", path, describe(v))
			return
		}
		for i, x := range l {
			checkValue(p, fmt.Sprintf("%s[%d]", path, i), t.Elem(), x)
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			p.addf("%s: want a string, got %s (quote it)", path, describe(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			p.addf("%s: want true or false, got %s", path, describe(v))
		}
	case reflect.Int32, reflect.Int64:
		n, ok := v.(json.Number)
		if !ok {
			p.addf("%s: want an integer, got %s", path, describe(v))
			return
		}
		if _, err := strconv.ParseInt(n.String(), 10, t.Bits()); errors.Is(err, strconv.ErrRange) {
			p.addf("%s: %s is out of range (at most %d)", path, n, int64(1)<<(t.Bits()-1)-1)
		} else if err != nil {
			p.addf("%s: want an integer, got the number %s", path, n)
		}
	default:
		p.addf("%s: the file format has no values of Go kind %s (a bug)", path, t.Kind())
	}
}

// fieldByKey finds the field of t whose JSON name is key.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if jsonName(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func jsonName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
	return name
}

// keyNames lists t's keys in the order the type declares them.
func keyNames(t reflect.Type) []string {
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		if name := jsonName(t.Field(i)); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

func keysOf(t reflect.Type) string { return strings.Join(keyNames(t), ", ") }

// resourceHints explain the keys that someone who knows the Topic and
// Subscription resources writes: the file is one pod's configuration, as
// the operator computes it, so it is flatter than the resources and has no
// selectors.
var resourceHints = map[reflect.Type]map[string]string{
	podConfigType: {
		"apiVersion": notAResource, "kind": notAResource, "metadata": notAResource, "spec": notAResource,
	},
	reflect.TypeFor[TopicPolicy](): {
		"limits":     "did you mean maxMessageBytes and publishRate? In this file they sit at the Topic's top level, not under limits as in the Topic resource",
		"latency":    "did you mean stampHeader? In this file it sits at the Topic's top level, not under latency as in the Topic resource",
		"publishers": "did you mean mayPublish? The file is this pod's own configuration: it says whether the pod may publish (default true) instead of selecting publishers",
	},
	reflect.TypeFor[SubscriptionPolicy](): {
		"selector": "the file is this pod's own configuration, so every Subscription in it applies to the pod: there is no selector",
	},
	reflect.TypeFor[AutoKillSwitch](): {
		"window":     "did you mean windowMillis? Durations are in milliseconds in this file (30s is 30000)",
		"cooldown":   "did you mean cooldownMillis? Durations are in milliseconds in this file (30s is 30000)",
		"maxLatency": "did you mean maxLatencyMillis? Durations are in milliseconds in this file (50ms is 50)",
	},
}

const notAResource = "the file is not a Kubernetes resource but one pod's configuration (see config/samples/sidecar/sidecar-config.yaml)"

// unknownKey says that key is not one of t's, with what was probably
// meant: a hint for the resources' shape, else a known key that differs by
// case or by at most two edits.
func unknownKey(path string, t reflect.Type, key string) string {
	msg := path + ": unknown field"
	if hint, ok := resourceHints[t][key]; ok {
		msg += "; " + hint
	} else if guess := closestKey(t, key); guess != "" {
		msg += "; did you mean " + guess + "?"
	}
	return fmt.Sprintf("%s (the keys here: %s)", msg, keysOf(t))
}

func closestKey(t reflect.Type, key string) string {
	best, bestDistance := "", 3 // more than two edits is a different word
	for _, name := range keyNames(t) {
		if strings.EqualFold(name, key) {
			return name
		}
		if d := editDistance(strings.ToLower(name), strings.ToLower(key)); d < bestDistance {
			best, bestDistance = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func orRoot(path string) string {
	if path == "" {
		return "the document"
	}
	return path
}

// describe names a decoded value's kind, with the value when it is short,
// in the file's words.
func describe(v any) string {
	switch v := v.(type) {
	case map[string]any:
		return "a mapping"
	case []any:
		return "a list"
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return fmt.Sprintf("the string %q", v)
	case json.Number:
		return "the number " + v.String()
	case bool:
		return fmt.Sprintf("%t", v)
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%T", v)
}
