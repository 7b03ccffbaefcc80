package matcher

import "testing"

func TestOverlaps(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"orders.>", "orders.eu", true},
		{"orders.>", "orders", false}, // '>' needs one token or more
		{"orders.*", "orders.eu.1", false},
		{"orders.*", "*.eu", true},
		{">", "$JS.API.x", true},
		{"orders.eu", "orders.us", false},
		{"a.*.c", "a.b.*", true},
		{"a.b", "a.b.c", false},
		{"a.>", "b.>", false},
		{"bad..subject", ">", false},
	}
	for _, tc := range tests {
		if got := Overlaps(tc.a, tc.b); got != tc.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := Overlaps(tc.b, tc.a); got != tc.want {
			t.Errorf("Overlaps(%q, %q) = %v, want %v (symmetry)", tc.b, tc.a, got, tc.want)
		}
	}
}
