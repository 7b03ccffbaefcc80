package desired_test

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weighstation/weighstation/api/v1alpha1"
	"github.com/weighstation/weighstation/controllers/desired"
)

func TestWithinLimitAdmitsTheTopicsCreatedFirst(t *testing.T) {
	at := func(name string, second int) v1alpha1.Topic {
		tp := topic("shop", name, name+".>")
		tp.CreationTimestamp = metav1.NewTime(time.Unix(1000+int64(second), 0))
		return tp
	}
	topics := []v1alpha1.Topic{at("d", 3), at("a", 4), at("c", 1), at("b", 1), at("e", 2)}
	tests := []struct {
		name       string
		max        int
		wantWithin []string // in the order given
		wantOver   []string
	}{
		{"no limit", -1, []string{"d", "a", "c", "b", "e"}, nil},
		{"a limit above the count", 10, []string{"d", "a", "c", "b", "e"}, nil},
		{"exactly the count", 5, []string{"d", "a", "c", "b", "e"}, nil},
		// Created first, ties by name: b and c (second 1), e (2), d (3).
		{"one over", 4, []string{"d", "c", "b", "e"}, []string{"a"}},
		{"two admitted", 2, []string{"c", "b"}, []string{"a", "d", "e"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			within, over := desired.WithinLimit(topics, tc.max)
			var got []string
			for _, tp := range within {
				got = append(got, tp.Name)
			}
			var gotOver []string
			for name := range over {
				gotOver = append(gotOver, name)
			}
			slices.Sort(gotOver)
			if !slices.Equal(got, tc.wantWithin) || !slices.Equal(gotOver, tc.wantOver) {
				t.Fatalf("within %v, over %v; want %v, %v", got, gotOver, tc.wantWithin, tc.wantOver)
			}
		})
	}
}
