package meshconfig

import (
	"reflect"
	"testing"
)

// TestEqualComparesEveryField changes each leaf field of a policy in turn
// (through pointers too) and expects Equal to see it: a field added to a
// policy and forgotten in Equal fails here.
func TestEqualComparesEveryField(t *testing.T) {
	topic := func() TopicPolicy {
		return TopicPolicy{Name: "t", Subject: "a.>", MaxMessageBytes: 1, PublishRate: &Rate{1, 2, 3, 4}, MayPublish: true, StampHeader: true}
	}
	sub := func() SubscriptionPolicy {
		return SubscriptionPolicy{Name: "s", Subject: "a.*", QueueGroup: "q", Essential: true,
			KillSwitch: KillSwitch{Engaged: true, Reason: "r", Auto: &AutoKillSwitch{1, 2, 3, 4}}, Limits: Limits{1, 2, "DropNewest"}}
	}
	if !topic().Equal(topic()) || !sub().Equal(sub()) {
		t.Fatal("equal policies in separate memory compare unequal")
	}
	equalSeesEveryLeaf(t, topic)
	equalSeesEveryLeaf(t, sub)
	a, b := topic(), topic()
	b.PublishRate = nil
	if a.Equal(b) || b.Equal(a) {
		t.Error("a rate and no rate compare equal")
	}
}

// equalSeesEveryLeaf changes each leaf field of a policy that newPolicy
// returns in turn, and expects Equal to see it.
func equalSeesEveryLeaf[P interface{ Equal(P) bool }](t *testing.T, newPolicy func() P) {
	t.Helper()
	for _, path := range leafPaths(reflect.TypeOf(newPolicy()), nil) {
		a, b := newPolicy(), newPolicy()
		bump(reflect.ValueOf(&b).Elem(), path)
		if a.Equal(b) {
			t.Errorf("%T.Equal misses field %v", a, path)
		}
	}
}

// leafPaths lists the field index paths of every leaf of typ, through
// structs and pointers to structs.
func leafPaths(typ reflect.Type, prefix []int) [][]int {
	if typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	var out [][]int
	for i := range typ.NumField() {
		path := append(append([]int(nil), prefix...), i)
		f := typ.Field(i).Type
		if f.Kind() == reflect.Struct || (f.Kind() == reflect.Pointer && f.Elem().Kind() == reflect.Struct) {
			out = append(out, leafPaths(f, path)...)
			continue
		}
		out = append(out, path)
	}
	return out
}

// bump changes the leaf at path (a fresh copy of any pointer on the way,
// so that the other policy is untouched).
func bump(v reflect.Value, path []int) {
	for _, i := range path {
		if v.Kind() == reflect.Pointer {
			fresh := reflect.New(v.Type().Elem())
			fresh.Elem().Set(v.Elem())
			v.Set(fresh)
			v = v.Elem()
		}
		v = v.Field(i)
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int32, reflect.Int64:
		v.SetInt(v.Int() + 1)
	default:
		panic("unhandled kind " + v.Kind().String())
	}
}
