package e2e

import "testing"

func TestRevocations(t *testing.T) {
	before := map[string]int64{}
	after, err := Revocations(map[string]string{
		TrustRevocationsKey: `{"shop":{"UAAA":1800000060,"*":1800000000},"billing":{"UBBB":1800000070}}`,
		"operator.jwt":      "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	fresh := NewRevocations(before, after)
	if len(fresh) != 2 || fresh["UAAA"] != 1_800_000_060 || fresh["UBBB"] != 1_800_000_070 {
		t.Fatalf("new revocations %v, want UAAA and UBBB of both namespaces, without the namespace-wide entry", fresh)
	}
	if len(NewRevocations(after, after)) != 0 {
		t.Fatal("the same list has new revocations")
	}
	if _, err := Revocations(map[string]string{}); err == nil {
		t.Fatal("a ConfigMap without the revocation lists was read")
	}
	if _, err := Revocations(map[string]string{TrustRevocationsKey: "not json"}); err == nil {
		t.Fatal("garbage was read")
	}
}
