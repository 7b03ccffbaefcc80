package reports

import (
	"cmp"
	"math"
	"slices"
	"unsafe"
)

// ReasonCount is a counter with the reason it counts.
type ReasonCount struct {
	Reason string
	Count  int64
}

// reasons is a counter by reason, sorted by reason, each reason once.
type reasons []ReasonCount

// delta is what a total grew by since prev. A total never shrinks within
// a series; one that does (a sidecar bug) counts as no growth, so that a
// window total is never negative.
func delta(cur, prev int64) int64 {
	if cur < prev {
		return 0
	}
	return cur - prev
}

// minus returns the reasons' deltas since prev, leaving out the ones that
// did not grow; shrank is called for each that shrank.
func (r reasons) minus(prev reasons, shrank func()) reasons {
	var out reasons
	for _, rc := range r {
		var before int64
		if i, ok := slices.BinarySearchFunc(prev, rc.Reason, compareReason); ok {
			before = prev[i].Count
		}
		if rc.Count < before {
			shrank()
		}
		if d := delta(rc.Count, before); d > 0 {
			out = append(out, ReasonCount{Reason: rc.Reason, Count: d})
		}
	}
	return out
}

// plus adds two sorted reason lists into a new one.
func (r reasons) plus(other reasons) reasons {
	out := make(reasons, 0, len(r)+len(other))
	i, j := 0, 0
	for i < len(r) || j < len(other) {
		switch {
		case j == len(other) || (i < len(r) && r[i].Reason < other[j].Reason):
			out = append(out, r[i])
			i++
		case i == len(r) || other[j].Reason < r[i].Reason:
			out = append(out, other[j])
			j++
		default:
			out = append(out, ReasonCount{Reason: r[i].Reason, Count: saturatingAdd(r[i].Count, other[j].Count)})
			i++
			j++
		}
	}
	return out
}

func (r reasons) bytes() int64 {
	n := int64(len(r)) * int64(unsafe.Sizeof(ReasonCount{}))
	for _, rc := range r {
		n += int64(len(rc.Reason))
	}
	return n
}

func compareReason(rc ReasonCount, reason string) int { return cmp.Compare(rc.Reason, reason) }

// reasonSum accumulates reasons from many slices.
type reasonSum map[string]int64

func (s reasonSum) add(r reasons) {
	for _, rc := range r {
		s[rc.Reason] = saturatingAdd(s[rc.Reason], rc.Count)
	}
}

// sorted returns the sums sorted by reason; nil when empty.
func (s reasonSum) sorted() []ReasonCount {
	if len(s) == 0 {
		return nil
	}
	out := make([]ReasonCount, 0, len(s))
	for reason, n := range s {
		out = append(out, ReasonCount{Reason: reason, Count: n})
	}
	slices.SortFunc(out, func(a, b ReasonCount) int { return cmp.Compare(a.Reason, b.Reason) })
	return out
}

func saturatingAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// toInt64 reads a wire counter; one past int64 saturates (it would take
// centuries of traffic).
func toInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}
